"""`carl-tui summary`, `export` and `fleet`: the dashboard's numbers without a screen.

They drive the same sources and store as the dashboard (`collect`), so what
they print is what the screen shows.

commands.py            the commands: read the sources, print, exit (status 0, 1 or 2)
collect.py             the sources polled into a store until they are caught up
summary.py             one run's numbers (`summary`, `--json`)
export.py              a run's metrics as CSV or JSONL (`export`)
completions_export.py  a run's GRPO completions (`export --completions`)
fleet_listing.py       every run, one row each (`fleet --json`, or an aligned table)
"""
