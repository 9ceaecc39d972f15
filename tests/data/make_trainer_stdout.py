"""Regenerate trainer_stdout.txt: the console output of a tiny real Trainer run.

Builds a tiny GPT-2 from a config (nothing downloaded), trains it for a few
steps on random token ids with `logging_steps=1` and progress bars on, and
writes stdout and stderr interleaved, exactly as a job log shows them.

    python tests/data/make_trainer_stdout.py
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "trainer_stdout.txt"

CHILD = r"""
import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments, set_seed

set_seed(0)
config = GPT2Config(vocab_size=64, n_positions=32, n_embd=16, n_layer=1, n_head=2)
model = GPT2LMHeadModel(config)


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, 64, (n, 16), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


args = TrainingArguments(
    output_dir="{outdir}",
    max_steps=12,
    per_device_train_batch_size=4,
    logging_steps=1,
    learning_rate=1e-3,
    report_to="none",
    disable_tqdm=False,
    save_strategy="no",
    use_cpu=True,
    seed=0,
)
Trainer(model=model, args=args, train_dataset=Tokens(32)).train()
"""


def main() -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "TQDM_MININTERVAL": "0", "PYTHONUNBUFFERED": "1"}
        env.setdefault("HF_HUB_OFFLINE", "1")
        proc = subprocess.run(
            [sys.executable, "-c", CHILD.replace("{outdir}", tmp)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            check=True,
        )
    OUT.write_bytes(proc.stdout)
    print(f"wrote {OUT} ({len(proc.stdout)} bytes)")


if __name__ == "__main__":
    main()
