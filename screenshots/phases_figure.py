"""Draw real training curves with the phases the dashboard gives them (README figure).

    python screenshots/phases_figure.py [--out screenshots/phases-real-runs.svg]

Each panel is a run of the corpus of real training histories (tests/data/real_runs and
real_runs_more), read through the store as the dashboard reads it: its progress metric
(token accuracy, or the task reward of a GRPO stage) as a thin line, its level (the mean
of the last 5% of the values) as a thick one, each phase as a band of its colour from
the step it began (where the curve changed), a tick at the top where the dashboard first
said it, and the phase-transition gate as a dashed line.
Plain SVG, no plotting library: deterministic, the same file on every machine.
"""

from __future__ import annotations

import argparse
import html
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

#: (corpus run, title) drawn top to bottom.
PANELS = (
    ("tiny-sft-pretrained-climbs-at-once",
     "tiny TRL SFT run of a pretrained model: it climbs in its first values"),
    ("sft-dheena731-tinyllama-finetune",
     "public SFT run (TinyLlama, 2,800 steps): a slow climb that stops far below 1: plateau"),
    ("tiny-sft-pause", ("tiny TRL SFT run with a pause (LR near 0, steps 80-130): once the "
                        "climb goes on, one transition")),
    ("grpo-imjonezz-unslothgrpo-outputs", "public GRPO run (250 steps): noisy reward 0 -> 1.8"),
    ("demo-seed0", "the demo: SFT (crystallised where the gate fired), then GRPO"),
)
COLOURS = {"baseline": "#8A94A6", "melting": "#FF8700", "transition": "#FFD75F",
           "plateau": "#D7AF87", "crystallisation": "#5FD7FF", "converged": "#5FD787"}
W, H, PAD, TOP = 900, 170, 48, 26


def panel(run, title: str, y0: float) -> list[str]:
    from tests.phase_checks import read

    snap = read(run.rows)
    steps = [int(s) for st in run.stages for s in st.steps]
    lo_s, hi_s = min(steps), max(steps)
    out = [f'<text x="{PAD}" y="{y0 + 16}" class="t">{html.escape(title)}</text>']
    top, h = y0 + TOP, H - TOP - 24

    def x(s: float) -> float:
        return PAD + (W - 2 * PAD) * (s - lo_s) / max(hi_s - lo_s, 1)

    def points(steps, values, lo: float, hi: float) -> str:  # a curve, lo..hi the panel's height
        return " ".join(f"{x(s):.1f},{top + h - h * (v - lo) / max(hi - lo, 1e-12):.1f}"
                        for s, v in zip(steps, values))

    hist = list(snap.phase.dated)
    for i, (name, step, seen, _kind) in enumerate(hist):
        end = hist[i + 1][1] if i + 1 < len(hist) else hi_s
        left, right = x(max(step, lo_s)), x(end)
        out.append(f'<rect x="{left:.1f}" y="{top}" width="{max(right - left, 1):.1f}" '
                   f'height="{h}" fill="{COLOURS[name]}" opacity="0.28"/>')
        if right - left > 8 * len(name):  # a label only where it fits
            out.append(f'<text x="{left + 2:.1f}" y="{top + 11}" class="p">{name}</text>')
        sx = x(seen)  # where the dashboard said it
        out.append(f'<path d="M{sx - 4:.1f},{top - 6} L{sx + 4:.1f},{top - 6} L{sx:.1f},{top}Z" '
                   f'fill="{COLOURS[name]}" stroke="#57606a" stroke-width="0.6"/>')
    for st in run.stages:
        lo, hi = float(min(st.values)), float(max(st.values))
        out.append(f'<polyline points="{points(st.steps, st.values, lo, hi)}" class="c"/>')
        k = max(3, len(st.values) // 20)  # its level: the mean of the last k values
        level = [sum(st.values[max(0, i - k + 1):i + 1]) / (i + 1 - max(0, i - k + 1))
                 for i in range(len(st.values))]
        out.append(f'<polyline points="{points(st.steps, level, lo, hi)}" class="l"/>')
        label = "token accuracy" if st.kind == "accuracy" else "task reward"
        out.append(f'<text x="{x(st.steps[0]) + 2:.1f}" y="{top + h - 4}" class="a">'
                   f'{label} {lo:.2f} .. {hi:.2f}</text>')
    if snap.gate.fired:
        gx = x(snap.gate.trigger_step)
        out.append(f'<line x1="{gx:.1f}" x2="{gx:.1f}" y1="{top}" y2="{top + h}" class="g"/>')
        out.append(f'<text x="{gx + 3:.1f}" y="{top + 24}" class="a">gate '
                   f'{snap.gate.trigger_step}</text>')
    out.append(f'<text x="{PAD}" y="{top + h + 14}" class="a">step {lo_s}</text>')
    out.append(f'<text x="{W - PAD}" y="{top + h + 14}" class="a" text-anchor="end">'
               f'step {hi_s}</text>')
    return out


def figure() -> str:
    from tests.real_runs import CORPUS, MORE, load_run

    body: list[str] = []
    for i, (name, title) in enumerate(PANELS):
        path = CORPUS / f"{name}.json"
        body += panel(load_run(path if path.exists() else MORE / f"{name}.json"), title, i * H)
    style = ("text{font-family:monospace;fill:#1f2328}.t{font-size:13px;font-weight:bold}"
             ".p{font-size:10px}.a{font-size:10px;fill:#57606a}"
             ".c{fill:none;stroke:#1f2328;stroke-width:0.8;opacity:0.55}"
             ".l{fill:none;stroke:#0550ae;stroke-width:2}"
             ".g{stroke:#cf222e;stroke-width:1.5;stroke-dasharray:4 3}")
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H * len(PANELS)}" '
            f'viewBox="0 0 {W} {H * len(PANELS)}"><style>{style}</style>'
            f'<rect width="100%" height="100%" fill="#ffffff"/>' + "".join(body) + "</svg>\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(HERE / "phases-real-runs.svg"))
    args = p.parse_args(argv)
    Path(args.out).write_text(figure(), encoding="utf-8")
    print(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
