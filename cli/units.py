"""Sizes as people read them, the same in the CLI and the dashboard (which
imports this module alone from the CLI: it imports nothing)."""
from __future__ import annotations


def format_bytes(size: int) -> str:
    """38.2 KB: decimal units, one decimal place."""
    if size < 1000:
        return f"{size} B"
    for unit in ("KB", "MB", "GB", "TB"):
        size /= 1000
        if size < 1000 or unit == "TB":
            return f"{size:.1f} {unit}"
    raise AssertionError("unreachable")
