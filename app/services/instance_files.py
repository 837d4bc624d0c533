"""Files the server writes for itself (keys, prices, site settings): each
replaced whole, so a reader never sees half of one."""
from __future__ import annotations

import os


def replace_file(path: str, text: str, mode: int = 0o644) -> None:
    """Writes `text` under another name and renames it over `path`."""
    temp = f"{path}.{os.getpid()}"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(temp, path)


def instance_secret(path: str, make) -> str:
    """A key kept in the instance folder (0600), made with `make()` the first
    time. Written whole under another name and linked into place (never
    replaced), so that server workers starting together all read the same,
    complete key."""
    if not os.path.exists(path):
        temp = f"{path}.{os.getpid()}"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(make() + "\n")
        try:
            os.link(temp, path)
        except FileExistsError:
            pass   # another worker was first: use its key
        finally:
            os.unlink(temp)
    with open(path) as f:
        return f.read().strip()
