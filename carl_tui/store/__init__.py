"""Per-run, per-metric series with bounded memory, gate and phase state."""

from carl_tui.store.series import Series
from carl_tui.store.snapshot import (
    CascadeView,
    GateView,
    Notice,
    PhaseView,
    RunSnapshot,
    SeriesView,
    StoreSummary,
)
from carl_tui.store.store import RunStore

__all__ = [
    "CascadeView",
    "GateView",
    "Notice",
    "PhaseView",
    "RunSnapshot",
    "RunStore",
    "Series",
    "SeriesView",
    "StoreSummary",
]
