"""The CLI's cache of local files' hashes (cli/hash_cache.py): a file that
has not changed is not read again; any change, even one that keeps the
size and puts the old modification time back, is hashed again."""
from __future__ import annotations

import hashlib
import os
import time

import pytest

from divergent.cli import hash_cache
from divergent.cli.hash_cache import HashCache


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def _written_long_ago(path, data: bytes) -> os.stat_result:
    path.write_bytes(data)
    old = time.time() - 60
    os.utime(path, (old, old))
    # ctime is the change's own time: the cache waits out RACY_SECONDS after it.
    return os.stat(path)


def _hash(root, rel) -> str:
    cache = HashCache(root)
    sha = cache.sha256(rel, str(root / rel), os.stat(root / rel))
    cache.save()
    return sha


def test_an_unchanged_file_is_not_read_again_and_a_changed_one_is(tmp_path, monkeypatch):
    root = tmp_path / "data"
    root.mkdir()
    path = root / "a.bin"
    st = _written_long_ago(path, b"first")
    monkeypatch.setattr(hash_cache, "RACY_SECONDS", 0)
    assert _hash(root, "a.bin") == hashlib.sha256(b"first").hexdigest()

    def read_again(_path):
        raise AssertionError("an unchanged file was read again")
    with monkeypatch.context() as patched:
        patched.setattr(hash_cache, "file_sha256", read_again)
        assert _hash(root, "a.bin") == hashlib.sha256(b"first").hexdigest()
    # Same size, the old modification time put back: its change time tells.
    path.write_bytes(b"other")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert _hash(root, "a.bin") == hashlib.sha256(b"other").hexdigest()


def test_a_file_changed_a_moment_ago_is_hashed_again_next_time(tmp_path, monkeypatch):
    root = tmp_path / "data"
    root.mkdir()
    (root / "new.bin").write_bytes(b"now")
    assert _hash(root, "new.bin") == hashlib.sha256(b"now").hexdigest()
    assert HashCache(root).known == {}      # racily clean: not kept


def test_a_cache_that_cannot_be_read_or_written_is_no_error(tmp_path, monkeypatch):
    root = tmp_path / "data"
    root.mkdir()
    _written_long_ago(root / "a.bin", b"x")
    cache_home = tmp_path / "cache" / "div" / "hashes"
    cache_home.mkdir(parents=True)
    (cache_home / HashCache(root).path.name).write_text("{not json")
    monkeypatch.setattr(hash_cache, "RACY_SECONDS", 0)
    assert _hash(root, "a.bin") == hashlib.sha256(b"x").hexdigest()
    monkeypatch.setenv("XDG_CACHE_HOME", "/proc/no-such-place")
    assert _hash(root, "a.bin") == hashlib.sha256(b"x").hexdigest()
