"""The catalogue database: typed models, engines and sessions, migrations, backlog queries."""
