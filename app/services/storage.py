"""Files in volumes: every user path resolved inside its volume, uploads that
are never seen half written, listings, deletes. A volume is a folder on the
share (app/services/volumes.py); nothing here trusts a path a user sent.

Uploads land in <org>/.uploads/ (on the same filesystem, never a volume: a
volume name cannot start with a dot) and are renamed into place once their
sha256 matches the one the client sent. The hash of a stored file is kept in
an extended attribute with its size and mtime, so that asking "does the
volume already have this file?" does not reread it; where the share has no
user xattrs the file is hashed again."""
from __future__ import annotations

import errno
import hashlib
import os
import posixpath
import secrets
import shutil
import stat
import tarfile
import time
from dataclasses import dataclass

from app.extensions import db
from app.models import Org, Volume
from app.services.errors import Conflict, Invalid, NotFound, ServiceError, Unavailable
from app.services.volumes import check_volume_name, ensure_volume, org_dir, volume_dir

MAX_FILE_BYTES = 256 * 1000 * 1000   # the guide: at most 256 MB a file
MAX_FILE_SECONDS = 300               # and 5 minutes to upload it
CHUNK = 1 << 20
HASH_XATTR = "user.div.sha256"


class ShareFull(ServiceError):
    status = 507


@dataclass(frozen=True)
class Entry:
    path: str        # relative to the volume, with /
    type: str        # file or dir
    size: int
    mtime: float

    def as_json(self) -> dict:
        return {"path": self.path, "type": self.type, "size": self.size, "mtime": self.mtime}


def clean_path(path: object, allow_root: bool = True) -> str:
    """A user path as a relative path with /, or Invalid: no NUL, no absolute
    path, no `..`."""
    if not isinstance(path, str):
        raise Invalid("a path is a string")
    if "\0" in path:
        raise Invalid("a path must not contain NUL bytes")
    if path.startswith("/"):
        raise Invalid(f"{path!r}: paths are relative to the volume, not absolute")
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise Invalid(f"{path!r}: .. is not allowed in a volume path")
    if not parts and not allow_root:
        raise Invalid("name a file or folder in the volume")
    return "/".join(parts)


def _inside(root: str, path: str) -> bool:
    return path == root or path.startswith(root + os.sep)


def resolve(org: Org, volume: str, path: object, allow_root: bool = True) -> tuple[str, str]:
    """(volume folder, absolute path) for a path inside an existing volume.
    A symlink on the share that leads out of the volume is refused."""
    root = os.path.realpath(volume_dir(org, volume))
    if not os.path.isdir(root):
        raise NotFound(f"no volume named {volume!r}")
    rel = clean_path(path, allow_root)
    target = os.path.join(root, rel) if rel else root
    if not _inside(root, os.path.realpath(target)):
        raise Invalid(f"{rel!r} leads out of the volume (a symlink)")
    return root, target


def _entry(root: str, path: str, st: os.stat_result) -> Entry:
    kind = "dir" if stat.S_ISDIR(st.st_mode) else "file"
    return Entry(os.path.relpath(path, root).replace(os.sep, "/") if path != root else "",
                 kind, st.st_size if kind == "file" else 0, st.st_mtime)


def _walk_files(root: str, top: str):
    """Regular files under `top`, not following symlinks."""
    stack = [top]
    while stack:
        folder = stack.pop()
        with os.scandir(folder) as it:
            for item in it:
                if item.is_dir(follow_symlinks=False):
                    stack.append(item.path)
                elif item.is_file(follow_symlinks=False):
                    yield _entry(root, item.path, item.stat(follow_symlinks=False))


def list_path(org: Org, volume: str, path: str, recursive: bool = False) -> tuple[Entry, list[Entry]]:
    """The entry at `path` and what is in it: its children, or with
    `recursive` every file below it."""
    root, target = resolve(org, volume, path)
    try:
        st = os.stat(target)
    except FileNotFoundError:
        raise NotFound(f"no {clean_path(path)!r} in {volume}") from None
    top = _entry(root, target, st)
    if top.type == "file":
        return top, [top]
    if recursive:
        return top, sorted(_walk_files(root, target), key=lambda e: e.path)
    children = []
    with os.scandir(target) as it:
        for item in it:
            if item.is_symlink():
                continue
            children.append(_entry(root, item.path, item.stat(follow_symlinks=False)))
    return top, sorted(children, key=lambda e: e.path)


def volume_summaries(org: Org) -> list[dict]:
    rows = db.session.execute(db.select(Volume).filter_by(org_id=org.id).order_by(Volume.name))
    summaries = []
    for volume in rows.scalars():
        root = volume_dir(org, volume.name)
        files = list(_walk_files(root, root)) if os.path.isdir(root) else []
        summaries.append({"name": volume.name, "size": sum(f.size for f in files),
                          "files": len(files), "created_at": volume.created_at.isoformat()})
    return summaries


def _cached_hash(path: str, st: os.stat_result) -> str | None:
    try:
        mtime, size, sha = os.getxattr(path, HASH_XATTR).decode().split()
    except (OSError, ValueError):
        return None
    return sha if (int(mtime), int(size)) == (st.st_mtime_ns, st.st_size) else None


def _remember_hash(path: str, sha: str) -> None:
    st = os.stat(path)
    try:
        os.setxattr(path, HASH_XATTR, f"{st.st_mtime_ns} {st.st_size} {sha}".encode())
    except OSError:
        pass   # a share without user xattrs: the file is hashed when asked


def stored_hash(path: str) -> str:
    st = os.stat(path)
    sha = _cached_hash(path, st)
    if sha is None:
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            while chunk := f.read(CHUNK):
                digest.update(chunk)
        sha = digest.hexdigest()
        _remember_hash(path, sha)
    return sha


def files_to_send(org: Org, volume: str, files: object) -> list[str]:
    """Creates the volume if needed; returns the paths whose size and hash the
    volume does not already have."""
    if not isinstance(files, list):
        raise Invalid("files must be a list of {path, size, sha256}")
    ensure_volume(org, check_volume_name(volume))
    db.session.commit()
    wanted = []
    for item in files:
        if not isinstance(item, dict):
            raise Invalid("files must be a list of {path, size, sha256}")
        _, target = resolve(org, volume, item.get("path"), allow_root=False)
        try:
            st = os.stat(target)
        except FileNotFoundError:
            wanted.append(item["path"])
            continue
        if not stat.S_ISREG(st.st_mode) or st.st_size != item.get("size") \
                or stored_hash(target) != item.get("sha256"):
            wanted.append(item["path"])
    return wanted


def _share_errors(action):
    """Disk full and a share that is gone as clear errors; the temporary file
    goes, and nothing already stored is touched."""
    try:
        return action()
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise ShareFull("the share is full: the file was not stored; "
                            "nothing already stored was lost") from None
        if exc.errno in (errno.ENOENT, errno.ESTALE, errno.EIO, errno.ENOTCONN):
            raise Unavailable(f"the share is not available ({os.strerror(exc.errno)}); "
                              "nothing already stored was lost") from None
        raise


def _receive(org: Org, stream, length: int | None, sha256: str) -> str:
    """Writes the stream to a temporary file, within the limits, and checks
    its hash; returns the temporary path."""
    if length is not None and length > MAX_FILE_BYTES:
        raise Invalid(f"a file may be at most 256 MB ({length / 1e6:.0f} MB sent)")
    uploads = os.path.join(org_dir(org), ".uploads")
    os.makedirs(uploads, exist_ok=True)
    temp = os.path.join(uploads, secrets.token_hex(8))
    deadline = time.monotonic() + MAX_FILE_SECONDS
    digest, size = hashlib.sha256(), 0
    try:
        with open(temp, "wb") as out:
            while chunk := stream.read(CHUNK):
                size += len(chunk)
                if size > MAX_FILE_BYTES:
                    raise Invalid("a file may be at most 256 MB")
                if time.monotonic() > deadline:
                    raise Invalid("a file must finish uploading within 5 minutes")
                digest.update(chunk)
                out.write(chunk)
        if length is not None and size != length:
            raise Invalid(f"the upload ended after {size} of {length} bytes")
        if digest.hexdigest() != sha256:
            raise Invalid("the file's bytes do not match the sha256 sent with it")
        return temp
    except BaseException:
        if os.path.exists(temp):
            os.unlink(temp)
        raise


def _place(org: Org, volume: str, path: str, temp: str, sha256: str) -> None:
    root, target = resolve(org, volume, path, allow_root=False)
    parent = os.path.dirname(target)
    try:
        os.makedirs(parent, exist_ok=True)
    except FileExistsError:
        raise Conflict(f"{path}: a file is in the way of its folder") from None
    # makedirs may have walked through a link made meanwhile: check again.
    if not _inside(root, os.path.realpath(parent)):
        raise Invalid(f"{path!r} leads out of the volume (a symlink)")
    if os.path.isdir(target) and not os.path.islink(target):
        raise Conflict(f"{path} is a folder in the volume")
    os.replace(temp, target)
    _remember_hash(target, sha256)


def store_file(org: Org, volume: str, path: str, stream, length: int | None,
               sha256: str) -> None:
    resolve(org, volume, path, allow_root=False)   # refuse before reading a byte

    def action():
        temp = _receive(org, stream, length, sha256)
        try:
            _place(org, volume, path, temp, sha256)
        finally:
            if os.path.exists(temp):
                os.unlink(temp)
    _share_errors(action)


def store_bundle(org: Org, volume: str, stream) -> int:
    """Many small files in one request: a tar stream whose members each carry
    their sha256 in a pax header (DIV.sha256). Each is checked and renamed
    into place on its own, so an interrupted bundle leaves whole files only."""
    resolve(org, volume, "")

    def action():
        stored = 0
        with tarfile.open(fileobj=stream, mode="r|") as bundle:
            for member in bundle:
                if not member.isfile():
                    raise Invalid(f"{member.name}: a bundle holds regular files only")
                sha = member.pax_headers.get("DIV.sha256", "")
                path = clean_path(member.name, allow_root=False)
                resolve(org, volume, path, allow_root=False)
                temp = _receive(org, bundle.extractfile(member), member.size, sha)
                try:
                    _place(org, volume, path, temp, sha)
                finally:
                    if os.path.exists(temp):
                        os.unlink(temp)
                stored += 1
        return stored
    try:
        return _share_errors(action)
    except tarfile.TarError as exc:
        raise Invalid(f"not a tar bundle: {exc}") from None


def file_for_download(org: Org, volume: str, path: str) -> str:
    _, target = resolve(org, volume, path, allow_root=False)
    if not os.path.isfile(target):
        raise NotFound(f"no file {clean_path(path)!r} in {volume}")
    return target


def delete(org: Org, volume: str, path: str) -> None:
    root, target = resolve(org, volume, path, allow_root=False)
    if os.path.islink(target) or os.path.isfile(target):
        os.unlink(target)
    elif os.path.isdir(target):
        shutil.rmtree(target)
    else:
        raise NotFound(f"no {clean_path(path)!r} in {volume}")


def delete_volume(org: Org, volume: str) -> None:
    row = db.session.execute(db.select(Volume).filter_by(
        org_id=org.id, name=check_volume_name(volume))).scalar_one_or_none()
    if row is None:
        raise NotFound(f"no volume named {volume!r}")
    shutil.rmtree(volume_dir(org, volume), ignore_errors=True)
    db.session.delete(row)
    db.session.commit()
