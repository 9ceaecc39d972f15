"""What a transformers model's config says about its text side (multimodal models nest it)."""

from __future__ import annotations


def text_config(model):
    """The config of the model's language part: `get_text_config()` where there is one."""
    cfg = model.config
    return cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg


def vocab_size(model) -> int:
    """V, the size of the vocabulary the output layer scores."""
    return int(text_config(model).vocab_size)
