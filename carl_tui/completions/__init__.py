"""Completions: what the model said at each logged step of a GRPO run, beside its phases.

TRL's GRPO trainer with `log_completions=True` puts the same table (prompt,
completion, each reward function's score, advantage) in several places; one
reader per place, all giving `CompletionTable`s (`model.py`):

model.py     Completion, CompletionTable: one row, one step's table (text redacted)
stdout.py    the rich tables TRL prints to the Trainer's stdout (2 decimals)
files.py     the parquet folder (`output_dir/completions/`), the CARL stream's
             `completions` lines, W&B table files (`files/media/table/`)
trackio.py   Trackio tables stored inline in metrics rows (local store, server)
log.py       CompletionLog: the index of every step's table, the last N in memory
readers.py   which readers a source named on the command line has
writers.py   `carl-tui export --completions`: JSONL or CSV rows

No Textual and no numpy here.
"""
