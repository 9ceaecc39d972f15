"""Follow a Trainer's console output in a file: `nohup.out`, a SLURM `.out`,
`python train.py 2>&1 | tee train.log`.

The same events as a Hugging Face Job's log (`hf_jobs`): `LogLines` (the raw
lines, as printed), one `ScalarBatch` of the dicts of each read, `Progress`
from the training bar, `RunMeta` for the end-of-training summary and
`{"steps_estimated": True}` when a step could not be recovered exactly. How
steps are recovered is in `trainer_log`: a dict is held back until the bar
drawn after it; when nothing new has come for `idle_flush_s` seconds, what is
held is released with the best step the log allows.

Reading goes through `FileFollower` (byte-offset tailing; truncation and
replacement start a new generation: the file is read again from the start with
a fresh parser, and a log line says so); the completions tables TRL prints are
marked as they are read (`completions_lines`), for the completions view. A file
source never finishes: its writer may always append.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from carl_tui.events import Event, RunRef
from carl_tui.identity import TRAINER_LOG, file_run
from carl_tui.sources.base import PolledSource, SourceError
from carl_tui.sources.line_marks import PanelMarks
from carl_tui.sources.tail import FileFollower
from carl_tui.sources.trainer_log import TrainerLogParser, TrainerOutput
from carl_tui.sources.unused_input import UnusedInput


class TrainerLogSource(PolledSource):
    """Tails one Trainer stdout file (a `Source`: `interval` is 0 while a backlog is
    read; a run whose end-of-training summary was read is finished)."""

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        run: RunRef | None = None,
        interval: float = 0.5,
        idle_flush_s: float = 2.0,
        logging_steps: int = 1,
        max_bytes_per_poll: int = 8 << 20,
        since: float | None = None,
    ):
        self.path = Path(path)
        self.name = f"trainer-log: {self.path.name}"
        self.run = run or file_run(self.path, TRAINER_LOG)
        self._interval = interval
        self.finished = False
        self.limitation = ""
        self.unused_input = UnusedInput()
        self.output = TrainerOutput(self.run, self.unused_input, logging_steps=logging_steps,
                                    idle_flush_s=idle_flush_s)
        self.generation = 0
        self._follower = FileFollower(self.path, max_bytes_per_poll=max_bytes_per_poll,
                                      since=since)
        # the completions view's tables, marked as they are read: the file is read once
        self.completions_lines = PanelMarks(self._follower)
        self.behind = False

    @property
    def parser(self) -> TrainerLogParser:
        return self.output.parser

    @property
    def idle_flush_s(self) -> float:
        return self.output.idle_flush_s

    @idle_flush_s.setter
    def idle_flush_s(self, seconds: float) -> None:
        self.output.idle_flush_s = seconds

    def __repr__(self) -> str:
        return f"TrainerLogSource({str(self.path)!r})"



    def poll(self) -> list[Event]:
        now = time.monotonic()
        try:
            read = self._follower.read()
        except SourceError:
            if self.parser.pending:  # the file went away: release what is held, then say so
                return self.output.flush()
            raise
        self.completions_lines.feed(read)
        self.behind = read.backlog
        for reason, example in read.dropped:
            self.unused_input.skip(reason, example.decode("utf-8", "replace"))
        events: list[Event] = []
        if read.generation != self.generation:
            events.extend(self.output.restart())  # the old file's last dicts
            self.generation = read.generation
        notes = [f"[carl-tui] {note}" for note in read.notes]
        lines = [raw.decode("utf-8", "replace") for raw in read.lines]
        # What is held waits while a backlog is read: the bars to place it may follow.
        events.extend(self.output.events(lines, now, release=not lines or not read.backlog,
                                         shown=notes))
        self.finish_runs_at_training_end(events)
        return events

    def drain(self) -> list[Event]:
        """Release the dicts held back for the bar that would place them: the reader is
        stopping here (`summary`, `export`), so nothing more will come to place them."""
        held = self.output.flush()
        self.finish_runs_at_training_end(held)
        return held

    def close(self) -> None:
        self._follower.close()
