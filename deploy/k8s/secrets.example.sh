#!/bin/sh
# Creates the two secrets deploy/helm/values.yaml refers to, from passwords in the environment, so no
# password is ever written into a file the project keeps. Run once per namespace:
#   DAGSTER_PG_PASSWORD=... CATALOGUE_PG_PASSWORD=... sh deploy/k8s/secrets.example.sh
set -eu
NAMESPACE="${NAMESPACE:-stage-e}"
PG_HOST="${PG_HOST:-postgres.stage-e.svc.cluster.local}"
: "${DAGSTER_PG_PASSWORD:?set DAGSTER_PG_PASSWORD (the instance database role's password)}"
: "${CATALOGUE_PG_PASSWORD:?set CATALOGUE_PG_PASSWORD (the catalogue role's password)}"

# The chart's instance password: global.postgresqlSecretName, key postgresql-password.
kubectl -n "$NAMESPACE" create secret generic stage-e-dagster-postgresql \
  --from-literal=postgresql-password="$DAGSTER_PG_PASSWORD" \
  --dry-run=client -o yaml | kubectl apply -f -

# The catalogue URL, loaded whole as an environment variable by the code server and every run pod.
kubectl -n "$NAMESPACE" create secret generic stage-e-catalogue \
  --from-literal=STAGE_E_DATABASE_URL="postgresql+psycopg2://stage_e:${CATALOGUE_PG_PASSWORD}@${PG_HOST}:5432/stage_e" \
  --dry-run=client -o yaml | kubectl apply -f -
