"""What the API acknowledges survives a crash of the server's machine:
files and the folder entries that name them reach the disk before the
answer is sent."""
from __future__ import annotations

import ctypes
import errno
import os

_libc = ctypes.CDLL(None, use_errno=True)


def sync_folder(fd: int) -> None:
    """The folder's entries (a rename into it) on disk. A filesystem that
    cannot sync a folder (EINVAL: some network shares) keeps its own
    promises."""
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno != errno.EINVAL:
            raise


def sync_filesystem(path: str) -> None:
    """syncfs(2): everything written on the filesystem of `path` on disk. One
    call for a bundle of 10,000 files or a code tree, where a file and a
    folder fsync each would be 20,000 waits for the disk."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        if _libc.syncfs(fd) != 0:
            error = ctypes.get_errno()
            raise OSError(error, os.strerror(error), path)
    finally:
        os.close(fd)
