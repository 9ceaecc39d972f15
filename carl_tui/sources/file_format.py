"""Which format a file holds, from its first bytes (`sniff_format`), and the source that
reads a file of that format (`file_source`). Standard library only at import: the readers
load when a source is built, after the dashboard's first frame."""

from __future__ import annotations

from pathlib import Path

SNIFF_BYTES = 65536  # the head of a file that decides its format


def file_source(path: Path, file_format: str, run=None, since: float | None = None):
    """The source that reads `path` as `file_format` ("trainer-log", else a JSONL stream)."""
    if file_format == "trainer-log":
        # lazy: a kind's reader loads only once a source of it opens
        from carl_tui.sources.trainer_file import TrainerLogSource

        return TrainerLogSource(path, run=run, since=since)
    # lazy: a kind's reader loads only once a source of it opens
    from carl_tui.sources.jsonl import JsonlSource

    return JsonlSource(path, run=run, since=since)


def sniff_format(head: bytes) -> str | None:
    """"jsonl" or "trainer-log" from the first bytes of a file; None: not enough to tell."""
    # lazy: the log reader's patterns are kept off `carl-tui --help` and the first frame
    from carl_tui.sources.trainer_log import looks_like_trainer_log

    text = head.lstrip(b"\xef\xbb\xbf").lstrip()
    if not text:
        return None
    if looks_like_trainer_log(head):
        return "trainer-log"
    if text.startswith(b"{") and b"\n" in text:
        return "jsonl"
    if b"\n" not in text and len(head) < SNIFF_BYTES:
        return None  # wait for a whole first line
    return "trainer-log" if not text.startswith(b"{") else "jsonl"
