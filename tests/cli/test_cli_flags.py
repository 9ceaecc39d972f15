"""Every flag is checked before a screen opens: one line naming the flag, exit status 2."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from carl_tui.cli import main


def run_cli(argv: list[str], capsys) -> tuple[int, str]:
    try:
        rc = main(argv)
    except SystemExit as exc:  # argparse's own errors
        rc = exc.code
    return rc, capsys.readouterr().err


BAD = [
    (["--trackio", "http://[::1"], "--trackio", "not a valid URL"),
    (["--trackio", ""], "--trackio", "needs a Trackio server"),
    (["--trackio", "ftp://example.org/x"], "--trackio", "ftp:// is not supported"),
    (["--trackio", "http://127.0.0.1:99999"], "--trackio", "out of range"),
    (["--trackio", "http://127.0.0.1:abc"], "--trackio", "not a valid URL"),
    (["--vocab-size", "1"], "--vocab-size", "at least 2 tokens"),
    (["--vocab-size", "-5"], "--vocab-size", "at least 2 tokens"),
    (["--vocab-size", "many"], "--vocab-size", "not a whole number"),
    (["replay", "x.jsonl", "--speed", "nan"], "--speed", "number >= 0"),
    (["replay", "x.jsonl", "--speed", "-1"], "--speed", "number >= 0"),
    (["--keymap", "app.quit=notakey!!"], "--keymap", "not a key name"),
    (["--keymap", "app.nothing=x"], "--keymap", "unknown binding id 'app.nothing'"),
    (["--keymap", "app.quit"], "--keymap", "is not binding.id=key"),
    (["--keymap", "app.quit=hyperx+q"], "--keymap", "not a modifier"),
    (["--theme", "no-such-theme"], "--theme", "unknown theme 'no-such-theme'"),
    (["--watch", "a.jsonl", "--job", "abc"], "--watch and --job", "choose one source"),
    (["--gate-metric", " "], "--gate-metric", "must not be empty"),
    (["summary", "--timeout", "0", "x.jsonl"], "--timeout", "seconds > 0"),
    # One key for two actions: the later binding would never run (q no longer quits).
    (["--keymap", "app.quit=x,app.pick_run=x"], "--keymap",
     "'x' is bound to both app.quit and app.pick_run"),
    (["--keymap", "app.pick_run=q"], "--keymap", "'q' is bound to both app.quit and"),
    (["--keymap", "app.help=?,app.pick_run=question_mark"], "--keymap", "bound to both"),
    (["--keymap", "app.pick_run=ctrl+p"], "--keymap", "ctrl+p is the command palette"),
    (["--keymap", "app.events=ctrl+q"], "--keymap", "ctrl+q is Textual's quit"),
    (["--namespace", "my-org"], "--namespace", "give it with --job JOB_ID"),
    (["summary", "--namespace", "my-org", "x.jsonl"], "--namespace", "with --job"),
    (["--watchh", "a.jsonl"], "--watchh", "unknown option --watchh; did you mean --watch?"),
    (["summary", "a.jsonl", "--jsno"], "--jsno", "unknown option --jsno; did you mean --json?"),
    (["--gate-metric", "m" * 100_000], "--gate-metric",
     "too long for a metric name (100,000 characters; at most 256)"),
    (["export", "x.jsonl", "--metrics", "loss," + "m" * 300], "--metrics", "too long"),
    (["--run", "r" * 300], "--run", "too long"),
    (["--watch", "d/" * 3000], "--watch", "too long for a path"),
    (["--project", "a\nb"], "--project", "control characters"),
]


@pytest.mark.parametrize("argv,flag,words", BAD, ids=[" ".join(a) for a, _, _ in BAD])
def test_bad_flag_is_one_line_and_exit_2(argv, flag, words, capsys):
    rc, err = run_cli(argv, capsys)
    assert rc == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert flag in lines[0] and words in lines[0]
    assert len(lines[0]) < 500  # a value of any length is not echoed whole
    assert "Traceback" not in err


def test_job_without_the_hub_extra_is_one_line(capsys, monkeypatch):
    """--job is checked before the first frame without importing huggingface_hub (the
    job's source is built after it): without the extra, one line and exit 2."""
    import carl_tui.sources.hf_job_kinds as source_open

    real = source_open.find_spec
    monkeypatch.setattr(source_open, "find_spec",
                        lambda name: None if name == "huggingface_hub" else real(name))
    rc, err = run_cli(["--job", "6910f0a2c3"], capsys)
    assert rc == 2 and err.count("\n") == 1
    assert "--job needs the [hub] extra: pip install 'carl-tui[hub]'" in err
    assert "Traceback" not in err and "huggingface_hub" in err


def test_a_directory_is_refused_with_a_hint(tmp_path, capsys):
    logdir = tmp_path / "runs" / "a"
    logdir.mkdir(parents=True)
    (logdir / "events.out.tfevents.1.host").write_bytes(b"")
    rc, err = run_cli(["--watch", str(tmp_path / "runs")], capsys)
    assert rc == 2 and "is a directory" in err and "--tensorboard" in err
    rc, err = run_cli(["replay", str(tmp_path)], capsys)
    assert rc == 2 and "replay" in err and "is a directory" in err


def test_a_missing_file_waits_on_the_dashboard_but_not_in_summary(tmp_path, capsys):
    from carl_tui.sources.open import check_request, request

    check_request(request(watch=str(tmp_path / "later.jsonl")))  # the run may start later
    rc, err = run_cli(["summary", str(tmp_path / "later.jsonl")], capsys)
    assert rc == 1 and "no such file" in err  # an unknown source, like an empty run: 1


def test_a_keymap_that_moves_quit_leaves_q_free_for_another_action():
    from carl_tui.ui.keys import check_keymap

    assert check_keymap({"app.quit": "ctrl+q", "app.pick_run": "q"}) is None
    assert check_keymap({}) is None  # the default keys never clash


def test_the_url_trackio_show_prints_is_accepted():
    from carl_tui.sources.open import open_sources, request

    opened = open_sources(request(trackio="http://127.0.0.1:7860/?project=grpo-runs"))
    source = opened.sources[0]
    assert source.url == "http://127.0.0.1:7860" and source.project == "grpo-runs"


def test_keymap_and_theme_are_accepted_when_valid():
    from carl_tui.ui.keys import check_keymap
    from carl_tui.ui.themes import theme_names

    keymap = {"app.quit": "ctrl+q", "app.pick_run": "R", "app.help": "f1,question_mark"}
    assert check_keymap(keymap) is None
    assert {"carl-dark", "carl-light"} <= set(theme_names())


def test_ctrl_c_before_the_screen_exits_quietly(tmp_path):
    """A crash or an interrupt never exits 0; an interrupt prints no traceback."""
    code = (
        "import signal, os, sys\n"
        "from carl_tui import cli\n"
        "def boom(*a, **k):\n"
        "    raise KeyboardInterrupt\n"
        "cli.run_dashboard = boom\n"
        "sys.exit(cli.main(['--watch', 'x.jsonl']))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True,
                         text=True,
                         cwd=tmp_path, env={**os.environ}, timeout=60)
    assert out.returncode == 130 and "Traceback" not in out.stderr


def test_the_dashboard_without_a_terminal_says_so_instead_of_running_unseen(tmp_path):
    """A CI log or `< /dev/null`: no keys can reach it and nothing shows it; it used to run
    until killed. The run is printed by summary/export instead."""
    stream = tmp_path / "s.jsonl"
    stream.write_text('{"step": 1, "loss": 0.5}\n')
    env = {k: v for k, v in os.environ.items() if k != "TEXTUAL_DRIVER"}
    res = subprocess.run([sys.executable, "-m", "carl_tui", "--watch", str(stream)],
                         stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env,
                         check=False, timeout=60)
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr == ("carl-tui: the dashboard needs a terminal on stdin and stderr; in "
                          "scripts and CI, `carl-tui summary` and `carl-tui export` print "
                          "the run\n")
