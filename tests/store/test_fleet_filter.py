"""The fleet table's filter grammar (`store/fleet_filter.py`) and the grouping of other
runs' notices (`store/notice_groups.py`): pure functions, on rows and notices as the
store makes them."""

from __future__ import annotations

import pytest

from carl_tui.events import RunRef
from carl_tui.store.fleet import FleetRow
from carl_tui.store.fleet_filter import FilterError, parse_filter
from carl_tui.store.notice_groups import NoticeGrouper, group_other_runs
from carl_tui.store.snapshot import Notice


def row(name: str, state="live", phase=None, step=None, **config) -> FleetRow:
    return FleetRow(RunRef("trackio", "sweep", name, name), "trackio", state, phase=phase,
                    last_step=step, config=config)


ROWS = [
    row("grpo-a", phase="crystallisation", step=120, lr=1e-4, model="tiny gpt", seed=1),
    row("grpo-b", "finished", "melting", 80, lr="3e-4", model="tiny gpt", seed=2),
    row("sft-c", "failed", "crystallisation", 40, lr=1e-5, model="Qwen", seed=3),
    row("grpo-d", "stalled", None, None, model="qwen"),
]


def names(text: str) -> list[str]:
    f = parse_filter(text, {"lr", "model", "seed"})
    return [r.run.label for r in ROWS if f.matches(r)]


@pytest.mark.parametrize(("text", "want"), [
    ("", ["grpo-a", "grpo-b", "sft-c", "grpo-d"]),
    ("phase:crystallisation state:live lr>=1e-4 name~grpo", ["grpo-a"]),
    ("phase:crystallisation", ["grpo-a", "sft-c"]),
    ("phase:CRYSTALLISATION", ["grpo-a", "sft-c"]),
    ("state:FAILED", ["sft-c"]),
    ("name~GRPO", ["grpo-a", "grpo-b", "grpo-d"]),
    ("lr>=1e-4", ["grpo-a", "grpo-b"]),  # "3e-4" logged as text compares as a number
    ("lr<1e-4", ["sft-c"]),  # grpo-d has no lr: it matches no comparison
    ("lr=0.0001", ["grpo-a"]),
    ("lr!=0.0001", ["grpo-b", "sft-c"]),
    ("seed:2", ["grpo-b"]),
    ("seed>1 seed<=3", ["grpo-b", "sft-c"]),
    ("step>50", ["grpo-a", "grpo-b"]),
    ('model:"tiny gpt"', ["grpo-a", "grpo-b"]),
    ("model:qwen", ["sft-c", "grpo-d"]),
    ("model~wen", ["sft-c", "grpo-d"]),
])
def test_filter_terms_all_hold(text, want):
    assert names(text) == want


@pytest.mark.parametrize(("text", "why"), [
    ("colour:red", "unknown key 'colour' (known: name, run, project, source, state"),
    ("lr>>1", "'lr>>1': > compares numbers, and '>1' is not one"),
    ("lr>=fast", "'lr>=fast': >= compares numbers, and 'fast' is not one"),
    ("grpo", "'grpo': write key:value, key~text or key>=number"),
    ("state:", "'state:': no value after ':'"),
    ('name:"grpo', "cannot read the filter: No closing quotation"),
])
def test_a_bad_filter_says_why_in_one_line(text, why):
    with pytest.raises(FilterError) as err:
        parse_filter(text, {"lr", "model", "seed"})
    assert why in str(err.value) and "\n" not in str(err.value)


def test_config_keys_are_named_with_the_fields_when_a_key_is_unknown():
    with pytest.raises(FilterError, match=r"known: .*cost, health, lr, model, seed\)"):
        parse_filter("colour:red", {"seed", "lr", "model"})


def notice(seq: int, run: str, kind="phase_transition", text="Crystallised", sev="warning"):
    return Notice(seq, RunRef("trackio", "sweep", run, run), kind, 27, text, sev)


def test_one_notice_for_many_runs_of_one_kind_the_run_in_view_apart():
    notices = [notice(i, f"run-{i:03d}") for i in range(300)]
    notices.append(notice(300, "run-007", "job", "job RUNNING", "information"))
    shown = group_other_runs(notices, "trackio:sweep:run-000")
    assert [n.text for n in shown] == [
        "Crystallised",  # the run in view: as it is
        ("299 runs crystallised: run-001, run-002, run-003 and 296 more "
        "(e lists each; r: the fleet table)"),
        "job RUNNING",  # one run's: as it is
    ]
    assert shown[1].run.label == "sweep" and shown[1].severity == "warning"


def test_notices_of_other_runs_wait_for_their_burst_then_come_grouped():
    now = [0.0]
    grouper = NoticeGrouper(window=1.0, clock=lambda: now[0])
    current = "trackio:sweep:run-0"
    assert grouper.take([notice(1, "run-0"), notice(2, "run-1")], current) == [notice(1, "run-0")]
    now[0] = 0.5
    assert grouper.take([notice(3, "run-2")], current) == [] and grouper.due() == []
    now[0] = 1.0
    (told,) = grouper.due()
    assert told.text == "2 runs crystallised: run-1, run-2 (e lists each; r: the fleet table)"
    assert grouper.due() == [] and not grouper.holding
    grouper.take([notice(4, "run-3")], current)  # one run alone: its own notice, later
    now[0] = 2.5
    assert grouper.due() == [notice(4, "run-3")]
