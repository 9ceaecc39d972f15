"""Logged text is untrusted: model output, run names, config keys, metric names and
skipped lines reach the screen as the characters they hold. No escape sequence reaches
the terminal (OSC 52 writes the clipboard, `ESC[2J` wipes the screen, OSC 8 links, OSC 0
retitles the window, C1 controls, DSR/DA queries whose answers come back as keys), and
no bracket is read as Rich markup (`[/INST]` ended the app with MarkupError; `[bold red]`
was drawn styled). Checked in a real terminal (a pty) on the real CLI."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest

from benchmarks.pty_screen import Session

pytestmark = pytest.mark.timeout(180)

ESC = "\x1b"
# Each attack, and the bytes that show it reached the terminal unfiltered.
ATTACKS = {
    "OSC 52 (clipboard)": (f"{ESC}]52;c;ZXZpbA=={ESC}\\", b"\x1b]52;c;ZXZpbA=="),
    "ESC[2J (wipe)": (f"{ESC}[2J{ESC}[3J", b"\x1b[2J\x1b[3J"),
    "OSC 8 (link)": (f"{ESC}]8;;http://evil.example/{ESC}\\link{ESC}]8;;{ESC}\\",
                     b"\x1b]8;;http://evil.example"),
    "OSC 0 (title)": (f"{ESC}]0;pwned-title\x07", b"\x1b]0;pwned-title"),
    "C1 CSI": ("\x9b31mC1RED", "\x9b31mC1RED".encode()),
    "DSR query": (f"{ESC}[6nDSRQ", b"\x1b[6nDSRQ"),
    "DA query": (f"{ESC}[cDAQ", b"\x1b[cDAQ"),
    "NUL and BEL": ("NUL\x00BEL\x07\x07\x07END", b"\x07\x07\x07END"),
}
HOSTILE = " ".join(seq for seq, _ in ATTACKS.values())
PROMPT = "[INST] say hi [/INST] " + HOSTILE
COMPLETION = "MARKCOMP [bold red]styled[/] " + HOSTILE
RUN_NAME = "[/oops] run [bold red]styled[/]"
REWARD_ROW = (r"completion +\[/oops\] +ok +total +advantage",
              r"\n 1 +\[INST\] say hi \[/INST\] .*MARKCOMP .* 1\.000 +0\.500 +1\.500 +0\.100")


def hostile_stream(path: Path) -> Path:
    lines = [{"event": "meta", "name": RUN_NAME,
              "config": {"[/oops]": 7, "[bold red]opt[/]": "[/oops] value", "lr": 1e-4}}]
    lines += [{"step": s, "loss": 1.0 / s, "[/oops]": 0.5, "reward/[bold red]r[/]": 0.1 * s}
              for s in range(1, 6)]
    lines.append({"event": "completions", "step": 5, "rows": [
        {"prompt": PROMPT, "completion": COMPLETION,
         "rewards": {"[/oops]": 1.0, "ok": 0.5}, "advantage": 0.1}]})
    path.write_text("\n".join(json.dumps(x) for x in lines)
                    + "\nbad [/oops] [b]s[/b]\n")
    return path


def env() -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if not k.startswith("TEXTUAL")}
    out["TERM"] = "xterm-256color"
    return out


def open_and_close(term: Session, key: bytes, shows: str, *drawn: str) -> str:
    """The screen `key` opens, once it shows `shows` and every pattern of `drawn`."""
    os.write(term.fd, key)
    assert term.wait_until(lambda s: shows in s.text() and all(
        re.search(p, s.text()) for p in drawn), 20.0) is not None, \
        f"{key!r}: {shows!r} not on screen:\n{term.screen.text()}"
    text = term.screen.text()
    os.write(term.fd, b"\x1b")
    back = term.wait_until(lambda s: shows not in s.text() and "a Completions" in s.text(), 20.0)
    assert back is not None, term.screen.text()
    term.drain(0.3)
    return text


def test_hostile_text_in_every_view_reaches_the_terminal_as_text(tmp_path):
    stream = hostile_stream(tmp_path / "s.jsonl")
    argv = [sys.executable, "-m", "carl_tui", "--watch", str(stream)]
    with Session(argv, env(), size=(200, 50)) as term:
        first = term.wait_until(lambda s: "step 5" in s.text(), 30.0)
        assert first is not None, term.screen.text()
        dashboard = term.screen.text()
        completions = open_and_close(term, b"a", "MARKCOMP", *REWARD_ROW)
        events = open_and_close(term, b"e", "to report")
        card = open_and_close(term, b"i", "value")
        # the skipped line itself drawn (a busy machine draws the screen's title first)
        skipped = open_and_close(term, b"k", "skipped input", re.escape("bad [/oops]"))
        os.write(term.fd, b"q")
        assert term.wait_exit(10.0) is not None, "q did not end it"
        out = bytes(term.output)
    assert term.returncode == 0 and b"Traceback" not in out and b"MarkupError" not in out
    leaked = [name for name, (_, raw) in ATTACKS.items() if raw in out]
    assert leaked == []
    # No bell but the end of Textual's own pointer-shape sequences (OSC 22).
    assert b"\x07" not in re.sub(rb"\x1b\]22;[a-z-]*\x07", b"", out)
    # The logged text is on screen as the characters it holds, brackets and all.
    assert "[/oops]" in dashboard and "[bold red]r[/]" in dashboard  # metric names
    assert "[/oops] run [bold red]styled[/]" in dashboard  # the run's name
    assert "[/INST]" in completions and "[bold red]styled[/]" in completions
    # A reward named `[/oops]`: its column, and the step's row under it (waited for).
    assert all(re.search(p, completions) for p in REWARD_ROW)
    assert "[/oops] run [bold red]styled[/]: nothing to report" in events
    assert "[/oops]" in card and "[bold red]opt[/]" in card and "[/oops] value" in card
    assert "bad [/oops] [b]s[/b]" in skipped


def test_the_parquet_folder_and_the_csv_export_carry_no_control_character(tmp_path, capsys):
    """TRL's parquet folder beside the stream: its prompts are cleaned as the stream's
    are, and `export --completions --format csv` writes no ESC, NUL or C1 byte (tab and
    newline kept)."""
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    from tests.report.test_report import cli

    stream = hostile_stream(tmp_path / "s.jsonl")
    (tmp_path / "completions").mkdir()
    pq.write_table(pa.Table.from_pylist([
        {"step": 7, "prompt": PROMPT + "\ttab\nline", "completion": COMPLETION,
         "[/oops]": 0.25, "advantage": -0.5}]),
        tmp_path / "completions" / "completions_00007.parquet")
    for fmt in ("csv", "jsonl"):
        rc, out, err = cli(["export", str(stream), "--completions", "--format", fmt], capsys)
        assert rc == 0, err
        assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f]", out.replace("\r\n", "\n")), fmt
        assert "\\u001b" not in out and "\\u0000" not in out  # not in JSON's escapes either
        assert "[/INST]" in out and "MARKCOMP [bold red]styled[/]" in out and "[/oops]" in out
        assert "\ufffd]52;c;ZXZpbA==" in out  # the escape's text, harmless, still there
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["step"] for r in rows] == [5, 7]
    assert rows[1]["prompt"].endswith("\ttab\nline") and rows[1]["rewards"] == {"[/oops]": 0.25}


def test_every_table_of_the_ui_takes_strings_as_text():
    """One boundary: the UI's tables are `TextTable` / `PlainTable` (text_table.py); no
    module makes a Textual `DataTable` or a Rich `Table` of its own, where a logged
    string would be read as markup."""
    ui = Path(__file__).resolve().parents[1].parent / "carl_tui" / "ui"
    own = []
    for path in sorted(ui.rglob("*.py")):
        if path.name == "text_table.py":
            continue
        src = path.read_text()
        if re.search(r"\bDataTable\(|\(DataTable\)|from rich\.table import|\bTable\(|"
                     r"\bTable\.grid", src):
            own.append(path.name)
    assert own == []
