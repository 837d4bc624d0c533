"""A progress line on stderr (bytes, rate, ETA), rewritten in place at most
ten times a second; only on a terminal, never in logs or cron mail."""
from __future__ import annotations

import sys
import threading
import time

from cli.upload import format_bytes


class Progress:
    def __init__(self, label: str, total: int, enabled: bool | None = None):
        self.label, self.total, self.done = label, total, 0
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.started = time.monotonic()
        self._shown = 0.0
        self._lock = threading.Lock()

    def add(self, count: int) -> None:
        with self._lock:
            self.done += count
            now = time.monotonic()
            if self.enabled and now - self._shown >= 0.1:
                self._shown = now
                sys.stderr.write("\r\033[K" + self.line(now))
                sys.stderr.flush()

    def line(self, now: float) -> str:
        elapsed = max(now - self.started, 1e-6)
        rate = self.done / elapsed
        left = (self.total - self.done) / rate if rate > 0 else 0
        eta = f"{int(left) // 60}m {int(left) % 60:02d}s" if left >= 60 else f"{int(left)}s"
        return (f"{self.label} {format_bytes(self.done)} / {format_bytes(self.total)}  "
                f"{format_bytes(int(rate))}/s  ETA {eta}")

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()
