"""*** where a secret's value appears in a run's log. Values are matched as
bytes; while the run writes, a tail that could be the start of a value is
held back until the next read shows whether it is. Values shorter than 3
bytes are not masked: masking "1" would hide every 1 in the log."""
from __future__ import annotations

import re

MASK = b"***"
MIN_LENGTH = 3


class Masker:
    def __init__(self, values: list[str]):
        self._values = sorted({v.encode() for v in values if len(v.encode()) >= MIN_LENGTH},
                              key=len, reverse=True)
        self._pattern = (re.compile(b"|".join(re.escape(v) for v in self._values))
                         if self._values else None)

    def mask(self, data: bytes, final: bool) -> tuple[bytes, int]:
        """The masked bytes and how many of `data` they stand for."""
        if self._pattern is None:
            return data, len(data)
        used = len(data) if final else len(data) - self._partial_tail(data)
        return self._pattern.sub(MASK, data[:used]), used

    def _partial_tail(self, data: bytes) -> int:
        """The longest end of `data` that a value starts with."""
        longest = 0
        for value in self._values:
            for size in range(min(len(value) - 1, len(data)), longest, -1):
                if data.endswith(value[:size]):
                    longest = size
                    break
        return longest


NO_MASK = Masker([])
