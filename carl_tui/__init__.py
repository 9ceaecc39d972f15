"""carl-tui: a terminal dashboard for watching RL training of language models live."""

__version__ = "0.1.0"
