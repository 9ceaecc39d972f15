"""When the follower may take the next snapshot while a backlog of history is read.

The first snapshot of a run is shown at once; while the sources catch up on a long
history, the next comes once ten times what the last took to take and draw has passed
(a second at least), so that loading keeps the CPU; under the fleet table, where no
run is on screen, the store is looked at for notices about once a second.
"""

from __future__ import annotations

import time
from collections.abc import Callable

#: Under the fleet table, while a backlog of history is read, the store is looked at
#: for notices about once a second (their runs are grouped: "12 runs crystallised").
HIDDEN_PULL_S = 1.0
#: A snapshot and its drawing took this share of the time, at most, while catching up.
SHARE = 10
MIN_GAP_S = 1.0


class Pacer:
    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self.next_at = 0.0

    def holding(self, catching_up: bool) -> bool:
        """Whether to leave the store unread for now (only while a backlog is read)."""
        return catching_up and self.clock() < self.next_at

    def looked_hidden(self) -> None:
        """The store was looked at with no run on screen."""
        self.next_at = self.clock() + HIDDEN_PULL_S

    def drawn(self, cost: float) -> None:
        """A snapshot was taken; with its drawing it cost `cost` seconds."""
        self.next_at = self.clock() + max(SHARE * cost, MIN_GAP_S)
