"""Every key of the dashboard, as plain data: one list the app, the help, the
palette and the CLI's `--keymap` check all read.

The CLI imports this module only to check a dashboard's `--keymap` (beside the theme
check, which loads Textual too); `carl-tui --help` never loads it.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from textual.keys import Keys, _character_to_key

MODIFIERS = frozenset({"ctrl", "shift", "alt", "meta", "super", "hyper"})


@dataclass(frozen=True)
class Key:
    key: str
    action: str
    description: str
    id: str
    tooltip: str
    show: bool = True  # in the footer


APP_KEYS: tuple[Key, ...] = (  # the app's: navigation, theme, help
    Key("q", "quit", "Quit", "app.quit", "Quit carl-tui"),
    Key("question_mark", "help", "Help", "app.help", "List every key"),
    Key("r", "pick_run", "Runs", "app.pick_run",
        "The fleet table: every run, live; sort, filter, group, compare; enter opens one"),
    Key("P", "pick_project", "Projects", "app.pick_project", "Open another Trackio project",
        show=False),
    Key("t", "cycle_theme", "Theme", "app.theme", "Switch dark/light theme", show=False),
    Key("a", "completions", "Completions", "app.completions",
        "What the model said: GRPO completions with each reward and the advantage, step by "
        "step, at the edges of the phases"),
    Key("k", "skipped", "Skipped", "app.skipped",
        "Why input was skipped: each reason with its count and first example", show=False),
)

VIEW_KEYS: tuple[Key, ...] = (  # the dashboard screen's: how the run is viewed
    Key("m", "pick_metrics", "Metrics", "view.pick_metrics",
        "Choose which metrics the table shows"),
    Key("slash", "filter_metrics", "Filter", "view.filter",
        "Filter the metrics by name (a substring or a regex) in the table and the picker",
        show=False),
    Key("M", "metric_grid", "All plots", "view.metric_grid",
        "Every metric at once: a small plot each, with its name and last value; paged",
        show=False),
    Key("full_stop", "crosshair(1)", "Crosshair", "view.crosshair_right",
        "A crosshair on every plot: the step there and the value of each series (moves "
        "right; starts at the last point)", show=False),
    Key("comma", "crosshair(-1)", "Crosshair left", "view.crosshair_left",
        "Move the crosshair left", show=False),
    Key("escape", "crosshair(0)", "Hide crosshair", "view.crosshair_hide",
        "Hide the crosshair", show=False),
    Key("f", "toggle_grid_metric", "Plot", "view.plot_metric",
        "Plot the metric selected in the table in the grid (again: remove it)"),
    Key("x", "cycle_x_axis", "X axis", "chart.x_axis",
        "Plot against the step, the time since the start, or the tokens seen"),
    Key("w", "cycle_smoothing", "Smooth", "chart.smoothing",
        "Smoothing weight (EMA: 0, 0.6, 0.8, 0.9, 0.95, 0.99); the raw points stay, faint"),
    Key("z", "cycle_range", "Range", "chart.range",
        "Show the whole run, or the last 100 / 1k / 10k / 100k steps", show=False),
    Key("y", "toggle_log", "Log y", "chart.log_y",
        "Log scale on the plot of the metric selected in the table", show=False),
    Key("c", "compare", "Compare", "view.compare",
        "Choose runs, from any source, to overlay on every plot", show=False),
    Key("o", "toggle_overlay", "Overlay", "view.overlay",
        "Overlay every run of this project on every plot", show=False),
    Key("v", "toggle_log_panel", "Log", "view.log", "Show or hide the run's log lines"),
    Key("g", "toggle_system", "System", "view.system",
        "Show or hide the system panel: GPUs (utilization, memory, power), CPU and RAM",
        show=False),
    Key("i", "run_card", "Card", "view.run_card",
        "The run's card: its config, summary values, job and events", show=False),
    Key("h", "toggle_evidence", "Why", "view.evidence",
        "Why the phase holds: the level and its noise, the change point, the share of the "
        "climb done and the distance to the ceiling", show=False),
    Key("e", "events", "Events", "view.events",
        "The run's story on one timeline: phases, the gate, the cascade, alerts, health "
        "flags, job states",
        show=False),
    Key("F", "toggle_follow", "Follow", "view.follow",
        "Follow the end of the log, or pause scrolling", show=False),
    Key("ctrl+s", "save_view", "Save", "view.save",
        "Save the screen as SVG and the plotted data as CSV (in help, the fleet table: "
        "the screen)", show=False),
)

ACTION_KEYS: tuple[Key, ...] = (
    Key("l", "launch", "Launch", "actions.launch",
        "Launch a GRPO training run on HF Jobs or this machine (form)"),
    Key("s", "stop_job", "Stop", "actions.stop", "Stop the current run's job (asks first)"),
    Key("p", "push_checkpoint", "Push", "actions.push",
        "Push a checkpoint of the run to a Hub model repo"),
    Key("d", "diagnose", "Diagnose", "actions.diagnose",
        "Ask Claude what is happening in this run"),
    Key("j", "jobs", "Jobs", "actions.jobs", "List your Hugging Face jobs; enter follows one"),
)

ALL_KEYS: tuple[Key, ...] = APP_KEYS + VIEW_KEYS + ACTION_KEYS

FLEET_KEYS: tuple[Key, ...] = (  # the fleet table's (`r`, `carl-tui fleet`)
    Key("enter", "open_run", "Open", "fleet.open", "Open the run under the cursor"),
    Key("space", "toggle_select", "Select", "fleet.select",
        "Select the run to compare on the plots (again: unselect)"),
    Key("i", "card", "Card", "fleet.card",
        "The run's card: config, summary values, job, events; with runs selected, "
        "their differing config side by side"),
    Key("slash", "filter", "Filter", "fleet.filter",
        "Filter the runs: phase:crystallisation state:live lr>=1e-4 name~grpo"),
    Key("o", "cycle_sort", "Sort", "fleet.sort", "Sort by the next column (or click its header)"),
    Key("O", "reverse_sort", "Reverse", "fleet.reverse", "Reverse the order", show=False),
    Key("c", "choose_columns", "Columns", "fleet.columns",
        "Choose the columns shown (kept for next time); left/right scroll sideways"),
    Key("g", "cycle_group", "Group", "fleet.group",
        "Group the runs by a config key that differs between them (again: the next key)"),
    Key("escape", "close", "Back", "fleet.close", "Back to the run on the dashboard"),
)
# The app's own key on every other screen (help, the fleet table, the cards): the
# dashboard's ctrl+s (view.save, with the plotted data) comes first where it is shown.
SCREEN_KEYS: tuple[Key, ...] = (
    Key("ctrl+s", "save_screen", "Save", "app.save_screen",
        "Save the screen as SVG (on the dashboard: with the plotted data as CSV)", show=False),
)
# The keys active together: the dashboard's, and the fleet table's with the app's.
KEY_SCOPES: tuple[tuple[Key, ...], ...] = (
    ALL_KEYS, APP_KEYS + ACTION_KEYS + FLEET_KEYS + SCREEN_KEYS)

# What a read-only dashboard (`--read-only`, and `carl-tui serve` without `--allow-actions`)
# leaves out of the footer, the help and the palette, and refuses: the keys that act on the
# world (launch, stop, push, diagnose, the account's jobs) and writing files (ctrl+s).
READ_ONLY_HIDDEN: frozenset[str] = frozenset(k.action for k in ACTION_KEYS) | {
    "save_view", "save_screen"}


# What a recording played back (`replay`) leaves out of the footer, the help and the palette,
# and refuses with a reason: its run has no job here to stop and no checkpoint to push, and
# launching or the account's jobs belong to a dashboard of one's own runs.
RECORDING_HIDDEN: frozenset[str] = frozenset({"launch", "stop_job", "push_checkpoint", "jobs"})
# The demo (`carl-tui demo`) saves no checkpoint to push and is there to be watched; its
# training is a job of this machine that `s` stops and `j` lists.
DEMO_HIDDEN: frozenset[str] = frozenset({"launch", "push_checkpoint"})
_WHY_HIDDEN = {
    "launch": "launch from a dashboard of your own runs (carl-tui --watch, --trackio, ...)",
    "stop_job": "its run has no job here to stop",
    "push_checkpoint": "its run has no checkpoint here to push",
    "jobs": "the jobs list belongs to a dashboard of your own runs",
}


def hidden_actions(*, read_only: bool = False, recording: bool = False,
                   demo: bool = False) -> frozenset[str]:
    """The actions left out of the footer, the help and the palette, and refused."""
    hidden: frozenset[str] = READ_ONLY_HIDDEN if read_only else frozenset()
    if recording:
        hidden |= RECORDING_HIDDEN
    if demo:
        hidden |= DEMO_HIDDEN
    return hidden


def why_hidden(action: str, *, recording: bool = False, demo: bool = False) -> str | None:
    """One line saying why a replay or the demo refuses `action`; None where it acts."""
    if recording and action in RECORDING_HIDDEN:
        return f"A replay plays back a recording: {_WHY_HIDDEN[action]}."
    if demo and action in DEMO_HIDDEN:
        return f"The demo is there to be watched: {_WHY_HIDDEN[action]}."
    return None


# Where the footer has no room for every key (80 columns), the ones it keeps, most needed
# first; the rest stay bound and listed by `?`.
FOOTER_FIRST: tuple[str, ...] = (
    "help", "quit",
    "pop_screen", "page(1)", "page(-1)",  # the metric grid (M)
    "open_run", "toggle_select", "card", "filter", "cycle_sort", "choose_columns",  # fleet
    "cycle_group", "close",
    "pick_run", "pick_metrics", "toggle_grid_metric", "cycle_x_axis", "cycle_smoothing",
    "toggle_log_panel", "completions")


# The dashboard's keys had `app.` ids before they became the screen's own (`view.`): a
# keymap that names the old id still works.
RENAMED_IDS: dict[str, str] = {
    "app.pick_metrics": "view.pick_metrics",
    "app.plot_metric": "view.plot_metric",
    "app.compare": "view.compare",
    "app.overlay": "view.overlay",
    "app.log": "view.log",
    "app.system": "view.system",
    "app.events": "view.events",
    "app.follow": "view.follow",
    "app.save": "view.save",
}


def binding_ids() -> list[str]:
    return [k.id for k in ALL_KEYS + FLEET_KEYS]


def normalize_keymap(keymap: dict[str, str]) -> dict[str, str]:
    """`keymap` with the dashboard's old binding ids (RENAMED_IDS) under their new names."""
    return {RENAMED_IDS.get(bid, bid): key for bid, key in keymap.items()}


def check_key(key: str) -> str | None:
    """None when `key` is a key Textual can bind (`q`, `R`, `ctrl+q`, `f5`, `question_mark`,
    several joined by commas); else why not."""
    names = {k.value for k in Keys} | {f"f{i}" for i in range(1, 25)}
    names |= {_character_to_key(chr(c)) for c in range(33, 127)}
    names |= {"space", "enter", "tab", "backspace", "delete", "escape", "up", "down", "left",
              "right", "home", "end", "pageup", "pagedown", "insert"}
    for part in key.split(","):
        part = part.strip()
        if not part:
            return "an empty key"
        *mods, base = part.split("+")
        bad = [m for m in mods if m not in MODIFIERS]
        if bad:
            return f"{'+'.join(bad)!r} is not a modifier (ctrl, shift, alt, meta)"
        if len(base) == 1 and base.isprintable() and not base.isspace():
            continue
        if base not in names:
            return f"{base!r} is not a key name (examples: q, R, ctrl+q, f5, question_mark)"
    return None


def check_keymap(keymap: dict[str, str]) -> str | None:
    """None when every `binding id -> key` is valid; else one sentence naming the problem."""
    known = binding_ids()
    for bid, key in keymap.items():
        if bid not in known and bid not in RENAMED_IDS:
            close = difflib.get_close_matches(bid, known, n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            return f"unknown binding id {bid!r}{hint} (? lists every id, with its key)"
        why = check_key(key)
        if why:
            return f"{bid}={key}: {why}"
    return _check_clashes(normalize_keymap(keymap))


# Textual's own keys, always bound first: quit's second key, the palette, the interrupt.
RESERVED = {"ctrl+q": "Textual's quit", "ctrl+p": "the command palette",
            "ctrl+c": "Textual's interrupt"}


def _key_name(key: str) -> str:
    key = key.strip()
    return _character_to_key(key) if len(key) == 1 else key


def _check_clashes(keymap: dict[str, str]) -> str | None:
    """One key for two actions of one screen (the one bound later would never run: a
    keymap that gives `q` to another action leaves quit without its key), or a key
    Textual keeps."""
    for keys in KEY_SCOPES:
        why = _clash_in(keymap, keys)
        if why:
            return why
    return None


def _clash_in(keymap: dict[str, str], keys: tuple[Key, ...]) -> str | None:
    owner: dict[str, str] = {}
    for k in keys:
        for key in keymap.get(k.id, k.key).split(","):
            name = _key_name(key)
            if name in RESERVED and not (name == "ctrl+q" and k.id == "app.quit"):
                return f"{k.id}={key.strip()}: {key.strip()} is {RESERVED[name]}"
            if name in owner:
                return (f"{key.strip()!r} is bound to both {owner[name]} and {k.id}: "
                        "give each action its own key")
            owner[name] = k.id
    return None
