"""The health flags where people read them: the phase panel's health row, the fleet
table's `health` column (and its filter, `fleet --json` and its text), the events view,
`export`'s `health` column and `summary`'s `health` line; on real runs of the corpus
made to fail (tests/data/real_runs_more)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from carl_tui.events import RunRef, ScalarBatch
from carl_tui.store import RunStore
from carl_tui.store.health import Evidence, HealthFlag, flag_line, short_evidence, standing
from carl_tui.ui.widgets.phase_panel import PhasePanel, health_rows
from tests.real_runs import load_run

MORE = Path(__file__).resolve().parents[1] / "data" / "real_runs_more"
REF = RunRef("corpus", "p", "r", "real")


class Panel(PhasePanel):
    def _color(self, phase: str) -> str:  # no app (theme) here
        return "bold"

    def _severity_color(self, severity: str) -> str:
        return ""


def snapshot_of(name: str):
    store = RunStore()
    store.apply([ScalarBatch.from_rows(REF, load_run(MORE / name).rows)])
    return store.snapshot(REF.key)


def panel_lines(snap, width: int = 80) -> list[str]:
    console = Console(width=width, file=io.StringIO(), color_system=None)
    console.print(Panel()._render_snapshot(snap))
    return [line.rstrip() for line in console.file.getvalue().splitlines()]


def health_lines(snap, width: int = 80) -> list[str]:
    """The panel's health row: its line and the unlabelled line under it, if any."""
    lines = panel_lines(snap, width)
    i = next(i for i, line in enumerate(lines) if line.startswith("health "))
    out = [lines[i]]
    out += [line for line in lines[i + 1:i + 2] if line.startswith(" ")]
    return out


def flag(name: str, start: int, seen: int, severity: str = "warning",
         text: str = "x 1 (>= 0.5)") -> HealthFlag:
    return HealthFlag(name, start, seen, severity, Evidence("x", 1.0, 0.0, 0.5, 5, text))


# -- the words --------------------------------------------------------------------------

def test_standing_is_each_flag_once_worst_first_and_at_a_step_only_what_began_by_then():
    flags = [flag("truncation", 10, 14), flag("reward_dominance", 2, 30, "information"),
             flag("diverging", 40, 40, "error"), flag("diverging", 45, 45, "error"),
             flag("kl_drift", 5, 20)]
    assert [f.flag for f in standing(flags)] == [
        "diverging", "kl_drift", "truncation", "reward_dominance"]
    assert standing(flags)[0].from_step == 40  # the first time it was said
    assert [f.flag for f in standing(flags, step=10)] == [
        "kl_drift", "truncation", "reward_dominance"]
    assert standing(flags, step=1) == []


def test_a_flags_line_says_where_it_began_where_it_was_seen_and_its_evidence_in_short():
    f = flag("truncation", 128, 131,
             text="51% of completions clipped at the length cap (>= 50%)")
    assert flag_line(f) == ("truncation since step 128 (seen at 131): 51% of completions "
                            "clipped at the length cap")
    g = flag("no_learning_signal", 3, 3, text="no learning signal: 85% of groups have no "
             "reward variance (>= 80%)")
    assert flag_line(g) == "no_learning_signal since step 3: 85% of groups have no reward variance"
    h = flag("entropy_collapse", 1, 9, text="entropy collapsed: 0.12, from 1.3 at the start; "
             "task reward ceiling 0.8 +/- 0.1 at zero entropy (R = -1 exp(H) + 2, R^2 0.9 over 9 "
             "steps)")
    assert short_evidence(h) == "entropy 0.12, from 1.3 at the start"


# -- the phase panel ----------------------------------------------------------------------

def test_the_panel_says_the_truncation_of_a_real_run_made_to_fail_at_80_columns():
    snap = snapshot_of("tiny-grpo-truncation.json")
    (line, *rest) = health_lines(snap)
    assert line.startswith("health       truncation since step 128 (seen at 131): "
                           "51% of completions"), line
    assert len(line) <= 80 and len(rest) <= 1


def test_the_panel_says_healthy_of_a_healthy_real_run():
    assert health_lines(snapshot_of("tiny-grpo-healthy-1.json")) == ["health       healthy"]


def test_the_panel_puts_the_worst_flag_first_and_the_others_on_one_more_line():
    """A real SFT run made to diverge: its divergence (an error) before its warnings;
    the others by name and step, worst first, on the second line; two lines in all."""
    snap = snapshot_of("tiny-sft-collapse.json")
    first, second = health_lines(snap)
    assert first.startswith("health       diverging since step 183: loss diverging"), first
    assert second.split()[:8] == ["task_collapse", "since", "179", "·", "loss_spike",
                                  "since", "181", "·"], second
    assert second.split()[8].startswith("grad_spike") or second.split()[8] == "…", second
    assert "grad_spike since 183" in " ".join(health_lines(snap, 100)[1].split())
    assert all(len(x) <= 80 for x in (first, second))


def test_the_panel_states_the_reward_ceiling_once_its_fit_is_good():
    snap = snapshot_of("tiny-grpo-constant-reward-b.json")
    fit = snap.reward_ceiling
    assert fit is not None and fit.stated
    first, second = health_lines(snap)
    assert first.startswith("health       no_learning_signal since step 120 (seen at 127)")
    assert second.strip() == (f"task reward ceiling {fit.ceiling:.3g} ± {fit.ceiling_se:.2g} at "
                              f"zero entropy (R² {fit.r2:.2f})")
    assert "0.655 ± 0.014" in second


def test_the_health_rows_are_coloured_by_severity():
    snap = snapshot_of("tiny-sft-collapse.json")
    colors = {"error": "red", "warning": "yellow", "information": "cyan", "ok": "green"}
    rows = health_rows(snap, 0.0, colors.get)
    assert "red" in str(rows[0][1].style)
    spans = {rows[1][1].plain[s.start:s.end]: str(s.style) for s in rows[1][1].spans}
    assert spans["task_collapse"] == "yellow"
    healthy = health_rows(snapshot_of("tiny-grpo-healthy-1.json"), 0.0, colors.get)
    assert [(label, t.plain, str(t.style)) for label, t in healthy] == [
        ("health", "healthy", "green")]


def write_jsonl(name: str, folder: Path) -> Path:
    rows = load_run(MORE / name).rows
    path = folder / f"{Path(name).stem}.jsonl"
    path.write_text("".join(json.dumps({"step": s, **v}) + "\n" for s, v in rows))
    return path


async def test_the_dashboard_draws_the_health_row(tmp_path):
    from carl_tui.sources.open import open_file
    from carl_tui.ui.app import build_app
    from tests.conftest import dashboard_config, wait_for

    app = build_app(dashboard_config([open_file(write_jsonl("tiny-grpo-truncation.json",
                                                            tmp_path))],
                                     refresh_interval=0.05))
    async with app.run_test(size=(160, 45)) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None and app.snapshot.health,
                       timeout=20)
        await pilot.pause(0.3)
        lines = screen_lines(app.export_screenshot())
        i = next(i for i, line in enumerate(lines) if "health " in line)
        # the panel's half of the screen: the flag's line, its evidence wrapped under it
        row = " ".join(lines[i].split("│")[-2].split() + lines[i + 1].split("│")[-2].split())
        assert row == ("health truncation since step 128 (seen at 131): 51% of completions "
                       "clipped at the length cap"), lines[i:i + 2]


def screen_lines(svg: str) -> list[str]:
    """The drawn screen's text, line by line (screenshots/make.py reads it so)."""
    from tests.house.test_screenshots_script import load

    return load("make", "carl_screenshots_make").svg_lines(svg)


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__])


# -- the fleet ----------------------------------------------------------------------------

FLEET = ("tiny-grpo-truncation.json", "tiny-grpo-healthy-1.json", "tiny-sft-collapse.json",
         "tiny-grpo-entropy-collapse.json")


@pytest.fixture
def failed_fleet(tmp_path) -> list[Path]:
    """Real tiny TRL runs: one made to truncate, one healthy, one SFT made to diverge, one
    whose entropy was made to collapse; as the JSONL streams the TRL callback writes."""
    return [write_jsonl(name, tmp_path) for name in FLEET]


def test_fleet_json_and_text_say_each_runs_worst_flag_or_ok(failed_fleet, capsys):
    from tests.report.test_report import cli
    from tests.store.test_fleet import fleet

    argv = [a for p in failed_fleet for a in ("--watch", str(p))]
    rows = {r["run"]: r for r in fleet(argv, capsys)}
    assert {name: (r["health"], r["health_flags"]) for name, r in rows.items()} == {
        "tiny-grpo-truncation": ("truncation", ["truncation"]),
        "tiny-grpo-healthy-1": ("ok", []),
        "tiny-sft-collapse": ("diverging", ["diverging", "task_collapse", "loss_spike",
                                            "grad_spike"]),
        "tiny-grpo-entropy-collapse": ("entropy_collapse", [
            "entropy_collapse", "task_collapse", "truncation", "no_learning_signal"]),
    }
    rc, out, _ = cli(["fleet", *argv], capsys)
    assert rc == 0
    header, *lines = out.splitlines()
    assert header.split()[-1] == "health"
    assert {line.split()[0]: line.split()[-1] for line in lines} == {
        name: r["health"] for name, r in rows.items()}


def fleet_row(name: str, *health: str, severity: str = "warning"):
    from carl_tui.store.fleet import FleetRow

    return FleetRow(RunRef("jsonl", "p", name, name), "jsonl", "live", health=health,
                    health_severity=severity if health else None)


@pytest.mark.parametrize(("text", "want"), [
    ("health:truncation", ["a", "c"]),  # the worst or not: any flag standing
    ("health:TRUNCATION", ["a", "c"]),
    ("health:ok", ["b"]),
    ("health~spike", ["c"]),
    ("health:kl_drift", []),
])
def test_health_filters_on_every_flag_standing(text, want):
    from carl_tui.store.fleet_filter import parse_filter

    rows = [fleet_row("a", "truncation"), fleet_row("b"),
            fleet_row("c", "diverging", "truncation", "loss_spike", severity="error")]
    f = parse_filter(text)
    assert [r.run.label for r in rows if f.matches(r)] == want


async def test_the_fleet_table_draws_the_health_column_and_filters_on_it(failed_fleet):
    from carl_tui.sources.open import open_file
    from carl_tui.ui.app import build_app
    from tests.conftest import dashboard_config
    from tests.ui.test_fleet_screen import by_name, column, filter_with, open_fleet, wait_for

    app = build_app(dashboard_config([open_file(p) for p in failed_fleet],
                                     refresh_interval=0.05))
    async with app.run_test(size=(160, 30)) as pilot:
        await open_fleet(pilot, app, runs=len(FLEET))
        await wait_for(pilot, lambda: "ok" in column(app, "health"), timeout=10)
        assert by_name(app, "health") == {
            "tiny-grpo-truncation": "truncation", "tiny-grpo-healthy-1": "ok",
            "tiny-sft-collapse": "diverging +3", "tiny-grpo-entropy-collapse":
            "entropy_collapse +3"}
        lines = screen_lines(app.export_screenshot())
        assert any("tiny-sft-collapse" in line and "diverging +3" in line for line in lines)
        await filter_with(pilot, app, "health:truncation")
        await wait_for(pilot, lambda: sorted(column(app, "name")) == [
            "tiny-grpo-entropy-collapse", "tiny-grpo-truncation"], what="two runs")


# -- the events view ----------------------------------------------------------------------

async def test_the_events_view_lists_each_flag_with_where_it_began_and_its_numbers(tmp_path):
    from carl_tui.sources.open import open_file
    from carl_tui.ui.app import build_app
    from tests.conftest import dashboard_config, wait_for

    app = build_app(dashboard_config([open_file(write_jsonl("tiny-sft-collapse.json",
                                                            tmp_path))],
                                     refresh_interval=0.05))
    async with app.run_test(size=(120, 45)) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None and len(app.snapshot.health)
                       == 4, timeout=20)
        await pilot.press("e")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "EventsScreen")
        await pilot.pause(0.3)
        text = "\n".join(" ".join(line.replace("│", " ").split())
                         for line in screen_lines(app.export_screenshot()))
    # each flag once, named as the filter and the fleet column name it, at the step it
    # was said, where its trouble began when earlier, its evidence and its numbers
    assert "187 task_collapse since step 179: mean_token_accuracy fell from its best" in text
    assert "mean_token_accuracy 0.0913, trend -0.742, threshold 0.489, over 5 rows" in text
    assert "181 loss_spike loss 4.769 at step 181, far above its recent level" in text
    assert "loss 4.77, trend +4.2, threshold 1.11, over 50 rows" in text
    assert "183 diverging loss diverging: 6.949 at step 183" in text
    assert "183 grad_spike grad_norm 7.243 at step 183" in text


# -- export and summary -------------------------------------------------------------------

def test_export_says_the_flags_standing_at_each_step(tmp_path, capsys):
    import csv

    from tests.report.test_report import cli, export_rows

    path = str(write_jsonl("tiny-sft-collapse.json", tmp_path))
    rows = {r["step"]: r for r in export_rows([path], capsys)}
    assert "health" not in rows[178]
    assert rows[179]["health"] == "task_collapse"  # where its trouble began, in hindsight
    assert rows[182]["health"] == "task_collapse,loss_spike"
    assert rows[183]["health"] == "diverging,task_collapse,loss_spike,grad_spike"
    assert rows[300]["health"] == rows[183]["health"]
    rc, out, _ = cli(["export", path, "--format", "csv"], capsys)
    assert rc == 0
    table = list(csv.DictReader(io.StringIO(out)))
    assert list(table[0])[-1] == "health" and table[0]["health"] == ""
    by_step = {int(r["step"]): r["health"] for r in table}
    assert by_step[182] == "task_collapse,loss_spike" and by_step[178] == ""
    # --metrics picks the columns: health only when named
    rc, out, _ = cli(["export", path, "--format", "csv", "--metrics", "loss"], capsys)
    assert out.splitlines()[0] == "step,loss"
    rc, out, _ = cli(["export", path, "--format", "csv", "--metrics", "loss,health"], capsys)
    assert out.splitlines()[0] == "step,loss,health"
    rc, out, _ = cli(["export", path, "--format", "csv", "--metrics", "health"], capsys)
    assert out.splitlines()[0] == "step,health" and "183,\"diverging," in out


def test_summary_text_has_a_health_line(tmp_path, capsys):
    from tests.report.test_report import cli

    rc, out, _ = cli(["summary", str(write_jsonl("tiny-grpo-truncation.json", tmp_path))],
                     capsys)
    assert rc == 0
    health = [line for line in out.splitlines() if line.startswith("health")]
    assert health == [("health  truncation since step 128 (seen at 131): 51% of completions "
                       "clipped at the length cap")]
    rc, out, _ = cli(["summary", str(write_jsonl("tiny-grpo-healthy-1.json", tmp_path))],
                     capsys)
    assert [line for line in out.splitlines() if line.startswith("health")] == [
        "health  healthy"]
    rc, out, _ = cli(["summary", str(write_jsonl("tiny-sft-collapse.json", tmp_path))],
                     capsys)
    lines = out.splitlines()
    i = lines.index(next(line for line in lines if line.startswith("health")))
    assert lines[i].startswith("health  diverging since step 183: loss diverging")
    assert [line.split(" since ")[0].strip() for line in lines[i + 1:i + 4]] == [
        "task_collapse", "loss_spike", "grad_spike"]


def test_summary_states_the_reward_ceiling_once_its_fit_is_good(tmp_path, capsys):
    from tests.report.test_report import cli, summary

    path = str(write_jsonl("tiny-grpo-constant-reward-b.json", tmp_path))
    fit = summary([path], capsys)["reward_ceiling"]
    assert fit["ceiling"] == pytest.approx(0.6547, abs=1e-3) and fit["n"] == 150
    assert fit["ceiling"] == pytest.approx(fit["b"] - fit["a"])
    _, out, _ = cli(["summary", path], capsys)
    assert "        task reward ceiling 0.655 +/- 0.014 at zero entropy (R^2 0.65 over 150 steps)" \
        in out.splitlines()
    assert summary([str(write_jsonl("tiny-grpo-truncation.json", tmp_path))],
                   capsys)["reward_ceiling"] is None


def test_the_panel_says_stalled_by_the_dashboards_clock_while_the_job_runs():
    from carl_tui.events import Job

    store = RunStore()
    store.apply([ScalarBatch.from_rows(REF, [(s, {"loss": 1.0}) for s in range(1, 20)],
                                       wall_time=1000.0)])
    store.apply([ScalarBatch.from_rows(REF, [(20, {"loss": 1.0})], wall_time=1001.0)])
    store.apply([Job(REF, "j", "RUNNING")])
    snap = store.snapshot(REF.key)
    assert [t.plain for _, t in health_rows(snap, 1030.0)] == ["healthy"]
    (row,) = health_rows(snap, 5000.0)
    assert row[1].plain.startswith("stalled since step 20: no new data for 3999 s"), row
    panel = Panel()
    panel.now = 1030.0  # the dashboard's clock, not the machine's
    assert "health       healthy" in [x.rstrip() for x in panel_lines_of(panel, snap)]
    panel.now = 5000.0
    assert any(line.startswith("health       stalled since step 20")
               for line in panel_lines_of(panel, snap))


def panel_lines_of(panel, snap, width: int = 80) -> list[str]:
    console = Console(width=width, file=io.StringIO(), color_system=None)
    console.print(panel._render_snapshot(snap))
    return console.file.getvalue().splitlines()
