"""Bundled data: the demo recording and the script that generates it."""
