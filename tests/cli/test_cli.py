"""The command line: help is light, errors are clear."""

import json
import subprocess
import sys

from carl_tui.cli import build_parser, main

HEAVY = ["torch", "transformers", "trl", "anthropic", "huggingface_hub", "textual"]


def test_help_imports_nothing_heavy():
    code = (
        "import sys, contextlib, io\n"
        "from carl_tui.cli import main\n"
        "buf = io.StringIO()\n"
        "with contextlib.redirect_stdout(buf):\n"
        "    try:\n"
        "        main(['--help'])\n"
        "    except SystemExit:\n"
        "        pass\n"
        "import json\n"
        f"loaded = [m for m in {HEAVY!r} if m in sys.modules]\n"
        "print(json.dumps({'help': buf.getvalue(), 'loaded': loaded}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["loaded"] == []
    assert "--trackio" in result["help"] and "carl-tui demo" in result["help"]


def test_keymap_option_parses():
    args = build_parser().parse_args(["--keymap", "app.quit=ctrl+q, app.pick_run=R"])
    assert args.keymap == {"app.quit": "ctrl+q", "app.pick_run": "R"}


def test_missing_replay_file_is_a_clear_error(tmp_path, capsys):
    assert main(["replay", str(tmp_path / "nope.jsonl")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_empty_trackio_store_is_a_clear_error(tmp_path, capsys):
    assert main(["--trackio-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no Trackio projects" in err and "carl-tui demo" in err
    # summary and export: no run to report is exit 1, as the README says
    for command in ("summary", "export"):
        assert main([command, "--trackio-dir", str(tmp_path)]) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "no Trackio projects" in err
    assert main(["summary", "--trackio-dir", str(tmp_path), "--project", "p"]) == 1
    assert "no Trackio project 'p'" in capsys.readouterr().err


def test_demo_refuses_to_replace_an_existing_stream(tmp_path, capsys):
    """`demo --stream PATH` where PATH exists: one line, exit 2, the file as it was; with
    --overwrite it goes on (here to the terminal check, which fails first: still intact)."""
    stream = tmp_path / "run.jsonl"
    stream.write_text('{"step": 1}\n')
    assert main(["demo", "--stream", str(stream)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "exists" in err and "--overwrite" in err, err
    assert main(["demo", "--stream", str(stream), "--overwrite"]) == 2
    err = capsys.readouterr().err
    assert "terminal" in err and "exists" not in err, err
    assert stream.read_text() == '{"step": 1}\n'
