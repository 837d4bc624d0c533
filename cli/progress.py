"""A progress line on stderr (bytes, rate, ETA), rewritten in place at most
ten times a second; only on a terminal, never in logs or cron mail."""
from __future__ import annotations

import sys
import threading
import time

from divergent.terms import format_bytes

RATE_AFTER_SECONDS = 1.0


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

    def drop(self, count: int) -> None:
        """Bytes no longer to be sent (the server had them)."""
        with self._lock:
            self.total -= count

    def line(self, now: float) -> str:
        """Rate and ETA once there is a second's worth to judge by: the first
        chunks (a connection's set-up, a burst into a socket buffer) say
        nothing of the speed."""
        sizes = f"{self.label} {format_bytes(self.done)} / {format_bytes(self.total)}"
        elapsed = now - self.started
        if elapsed < RATE_AFTER_SECONDS or not self.done:
            return f"{sizes}  ETA -"
        rate = self.done / elapsed
        left = int((self.total - self.done) / rate)
        eta = (f"{left // 3600}h {left % 3600 // 60:02d}m" if left >= 3600 else
               f"{left // 60}m {left % 60:02d}s" if left >= 60 else f"{left}s")
        return f"{sizes}  {format_bytes(int(rate))}/s  ETA {eta}"

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()
