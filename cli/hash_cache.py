"""The sha256 of local files already read, kept between commands (as git's
index keeps them): a file whose size, modification and change times and
inode are what they were when it was hashed is not read again, so an
unchanged `div storage put` or `div run` reads no file. A file hashed within
RACY_SECONDS of its last change is hashed again next time: a write in the
same clock tick as the hash would leave its times as they were (git's
"racily clean" files)."""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
import time
from pathlib import Path

RACY_SECONDS = 2


def file_sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _cache_home() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(base) / "div" / "hashes"


class HashCache:
    """The hashes of the files under one folder; safe from several threads.
    What it cannot read or write is no error: it is a cache."""

    def __init__(self, root: Path):
        self.path = _cache_home() / f"{hashlib.sha256(os.fsencode(root)).hexdigest()[:32]}.json"
        self.known = self._load()
        self.seen: dict[str, list[object]] = {}
        self.lock = threading.Lock()

    def _load(self) -> dict[str, list[object]]:
        try:
            known = json.loads(self.path.read_bytes())
        except (OSError, ValueError):
            return {}
        return known if isinstance(known, dict) else {}

    def sha256(self, rel: str, path: str, st: os.stat_result) -> str:
        key = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
        held = self.known.get(rel)
        if isinstance(held, list) and len(held) == 5 and held[:4] == key \
                and isinstance(held[4], str):
            sha = held[4]
        else:
            sha = file_sha256(path)
        if time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) > RACY_SECONDS * 10**9:
            with self.lock:
                self.seen[rel] = [*key, sha]
        return sha

    def save(self) -> None:
        """Keeps the files seen this time (a file gone is forgotten)."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            with tempfile.NamedTemporaryFile("wb", dir=self.path.parent, delete=False,
                                             suffix=".tmp") as f:
                # dumps, not dump: the C encoder, ten times as fast as dump's stream.
                f.write(json.dumps(self.seen, separators=(",", ":")).encode())
            os.replace(f.name, self.path)
        except OSError:
            pass
