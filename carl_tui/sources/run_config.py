"""What a run's logged config says about the run: vocabulary size, model, method.

Shared by the readers of logs that carry a config (TensorBoard's config texts,
W&B's config records). `describe_config(cfg)` finds:

- `vocab_size`: at the top level, else in a nested model config
  (`{"model_config": {"vocab_size": ...}}`, `text_config`, ...), three levels
  down at most, breadth first; a whole number above 1 (an integral float too);
- `model`: `model_name_or_path`, `_name_or_path` (transformers' model config),
  `name_or_path`, `model_name`, `model` or `pretrain` at the top level, else
  one of the path-like keys in a nested dict (never a nested `model`, which may
  name a reward or reference model);
- `method` (sft/grpo/ppo): a `method`/`trainer`/`algorithm` entry naming one,
  else the fields only one TRL config has (`scale_rewards` with
  `num_generations`: GRPO; `num_ppo_epochs`: PPO; `dataset_text_field`: SFT),
  else OpenRLHF's `advantage_estimator` (`group_norm`: GRPO, `gae`: PPO).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import Any

import orjson

MODEL_KEYS = ("model_name_or_path", "_name_or_path", "name_or_path", "model_name", "model",
              "pretrain")
NESTED_MODEL_KEYS = ("model_name_or_path", "_name_or_path", "name_or_path", "model_name")
METHOD_KEYS = ("method", "trainer", "trainer_type", "trainer_class", "algorithm", "algo")


def loads_json(text: str | bytes) -> Any:
    """JSON as Python writers spell it (NaN and Infinity bare). Raises ValueError."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


def dicts_breadth_first(cfg: dict, depth: int = 3) -> Iterable[dict]:
    """`cfg` and the dicts inside it, level by level, `depth` levels down."""
    level = [cfg]
    for _ in range(depth + 1):
        nxt = []
        for d in level:
            yield d
            nxt.extend(v for v in d.values() if isinstance(v, dict))
        level = nxt


def vocab_size_of(cfg: dict) -> int | None:
    for d in dicts_breadth_first(cfg):
        v = d.get("vocab_size")
        if type(v) is int and v > 1:
            return v
        if type(v) is float and math.isfinite(v) and v > 1 and v == int(v):
            return int(v)
    return None


def model_of(cfg: dict) -> str | None:
    for key in MODEL_KEYS:
        v = cfg.get(key)
        if isinstance(v, str) and v:
            return v
    for d in dicts_breadth_first(cfg):
        if d is cfg:
            continue
        for key in NESTED_MODEL_KEYS:
            v = d.get(key)
            if isinstance(v, str) and v:
                return v
    return None


def _method_named(text: str) -> str | None:
    t = text.lower()
    for m in ("grpo", "ppo", "sft"):
        if m in t:
            return m
    return None


def method_of(cfg: dict) -> str | None:
    for key in METHOD_KEYS:
        v = cfg.get(key)
        if isinstance(v, str) and _method_named(v):
            return _method_named(v)
    if "num_generations" in cfg and "scale_rewards" in cfg:
        return "grpo"
    if "num_ppo_epochs" in cfg:
        return "ppo"
    if "dataset_text_field" in cfg:
        return "sft"
    estimator = cfg.get("advantage_estimator")
    if estimator == "group_norm":
        return "grpo"
    if estimator == "gae":
        return "ppo"
    return None


def describe_config(cfg: dict) -> dict[str, Any]:
    """`vocab_size`, `model` and `method` where the config says them (see the module)."""
    out: dict[str, Any] = {}
    for key, fn in (("vocab_size", vocab_size_of), ("model", model_of), ("method", method_of)):
        v = fn(cfg)
        if v is not None:
            out[key] = v
    return out
