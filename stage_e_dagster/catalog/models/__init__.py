"""Every table of the catalogue, importable from one place."""

from .canonical import Expansion, Printing
from .cards import CARD_TYPES, PRINTING_STATUSES, Card
from .dispatch import BATCH_STATUSES, CardClaim, ManifestRollout, MicroBatch, PoolControl, SweepCursor
from .envelope import FETCH_OUTCOMES, TRIP_BARS, EnvelopeTrip, FetchOutcome, FetchPacer
from .evidence import ImageEvidence
from .heartbeats import SensorHeartbeat, SensorTicker
from .outbox import LedgerOutbox
from .passes import StageDPass
from .votes import VOTE_SOURCES, PrintingVote, ScanLog

__all__ = [
    "BATCH_STATUSES",
    "CARD_TYPES",
    "FETCH_OUTCOMES",
    "PRINTING_STATUSES",
    "TRIP_BARS",
    "VOTE_SOURCES",
    "Card",
    "CardClaim",
    "EnvelopeTrip",
    "Expansion",
    "FetchOutcome",
    "FetchPacer",
    "ImageEvidence",
    "LedgerOutbox",
    "ManifestRollout",
    "MicroBatch",
    "PoolControl",
    "Printing",
    "PrintingVote",
    "ScanLog",
    "SensorHeartbeat",
    "SensorTicker",
    "StageDPass",
    "SweepCursor",
]
