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

import contextlib
import errno
import hashlib
import io
import os
import secrets
import shutil
import stat
import tarfile
import time
from dataclasses import dataclass

from app.extensions import db
from app.models import Org, Volume
from app.services.errors import Conflict, Invalid, NotFound, ServiceError, Unavailable
from app.services.volumes import (check_volume_name, data_path, ensure_volume, org_dir,
                                  volume_dir)

MAX_FILE_BYTES = 256 * 1000 * 1000   # the guide: at most 256 MB a file
MAX_FILE_SECONDS = 300               # and 5 minutes to upload it
MAX_BUNDLE_BYTES = 64 * 1000 * 1000
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


class Resolver:
    """Resolves many paths of one volume, each checked to stay inside it. The
    real path of each parent folder is worked out once, so that a plan or a
    bundle of 10,000 files in 100 folders costs 100 realpath calls, not
    10,000."""

    def __init__(self, org: Org, volume: str):
        self.root = os.path.realpath(volume_dir(org, volume))
        if not os.path.isdir(data_path("share")):
            raise Unavailable("the share is not available (not mounted?); "
                              "nothing already stored was lost")
        if not os.path.isdir(self.root):
            raise NotFound(f"no volume named {volume!r}")
        self._parents: dict[str, str] = {}

    def __call__(self, path: object, allow_root: bool = True) -> str:
        rel = clean_path(path, allow_root)
        if not rel:
            return self.root
        parent_rel, _, name = rel.rpartition("/")
        parent = self._parents.get(parent_rel)
        if parent is None:
            parent = os.path.realpath(os.path.join(self.root, parent_rel))
            self._parents[parent_rel] = parent
        target = os.path.join(parent, name)
        if os.path.islink(target):
            target = os.path.realpath(target)
        if not _inside(self.root, target):
            raise Invalid(f"{rel!r} leads out of the volume (a symlink)")
        return os.path.join(self.root, rel)


def resolve(org: Org, volume: str, path: object, allow_root: bool = True) -> tuple[str, str]:
    """(volume folder, absolute path) for a path inside an existing volume.
    A symlink on the share that leads out of the volume is refused."""
    resolver = Resolver(org, volume)
    return resolver.root, resolver(path, allow_root)


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


def _remember_hash(file: str | int, sha: str) -> None:
    """Keeps the hash with the size and mtime it is true for; `file` is a
    path or an open descriptor. A rename keeps both."""
    st = os.stat(file)
    try:
        os.setxattr(file, HASH_XATTR, f"{st.st_mtime_ns} {st.st_size} {sha}".encode())
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
    resolve_path = Resolver(org, volume)
    wanted = []
    for item in files:
        if not isinstance(item, dict):
            raise Invalid("files must be a list of {path, size, sha256}")
        target = resolve_path(item.get("path"), allow_root=False)
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


def uploads_dir(org: Org) -> str:
    uploads = os.path.join(org_dir(org), ".uploads")
    os.makedirs(uploads, exist_ok=True)
    return uploads


def receive_verified(folder: str, stream, length: int | None, sha256: str) -> str:
    """Writes the stream to a temporary file in `folder`, within the limits
    (256 MB, 5 minutes), checks its hash and records it (_remember_hash's
    xattr, set on the open file so no second open is needed); returns the
    temporary path, for the caller to rename into place. Code blobs and
    volume files both arrive through here."""
    if length is not None and length > MAX_FILE_BYTES:
        raise Invalid(f"a file may be at most 256 MB ({length / 1e6:.0f} MB sent)")
    temp = os.path.join(folder, f".{secrets.token_hex(8)}.part")
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
            out.flush()
            _remember_hash(out.fileno(), sha256)
        return temp
    except BaseException:
        if os.path.exists(temp):
            os.unlink(temp)
        raise


class VolumeFolders:
    """Folders of one volume opened a component at a time with O_NOFOLLOW,
    relative to the folder above: a write never follows a symlink, even one
    a run swaps in between a check and the write. The descriptors are kept
    for the request, so 10,000 files in 100 folders open 100 folders."""

    FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

    def __init__(self, root: str):
        self._fds = {"": os.open(root, self.FLAGS)}

    def folder(self, rel: str, create: bool) -> int:
        fd = self._fds.get(rel)
        if fd is not None:
            return fd
        parent_rel, _, name = rel.rpartition("/")
        parent = self.folder(parent_rel, create)
        if create:
            try:
                os.mkdir(name, dir_fd=parent)
            except FileExistsError:
                pass
        try:
            fd = os.open(name, self.FLAGS, dir_fd=parent)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise Invalid(f"{rel!r} is a symlink or a file, not a folder of the volume") from None
            if exc.errno == errno.ENOENT:
                raise NotFound(f"no {rel!r} in the volume") from None
            raise
        self._fds[rel] = fd
        return fd

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


def _place(folders: VolumeFolders, path: str, temp: str) -> None:
    """Renames the verified temporary file to `path`, never through a link."""
    parent_rel, _, name = path.rpartition("/")
    parent = folders.folder(parent_rel, create=True)
    try:
        if stat.S_ISDIR(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode):
            raise Conflict(f"{path} is a folder in the volume")
    except FileNotFoundError:
        pass
    os.replace(temp, name, dst_dir_fd=parent)   # replaces a link itself, never its target


@contextlib.contextmanager
def folders_closed(folders: VolumeFolders):
    try:
        yield folders
    finally:
        folders.close()


def store_file(org: Org, volume: str, path: str, stream, length: int | None,
               sha256: str) -> None:
    resolve_path = Resolver(org, volume)
    path = clean_path(path, allow_root=False)
    resolve_path(path)   # refuse before reading a byte

    def action():
        with folders_closed(VolumeFolders(resolve_path.root)) as folders:
            temp = receive_verified(uploads_dir(org), stream, length, sha256)
            try:
                _place(folders, path, temp)
            finally:
                if os.path.exists(temp):
                    os.unlink(temp)
    _share_errors(action)


def store_bundle(org: Org, volume: str, stream, length: int | None) -> int:
    """Many small files in one request: a tar of at most 64 MB whose members
    each carry their sha256 in a pax header (DIV.sha256). It is read whole
    first (tarfile's stream mode reads the socket 10 KB at a time), then each
    member is checked and renamed into place on its own, so a bundle cut
    short leaves whole files only."""
    resolve_path = Resolver(org, volume)
    if length is None or length > MAX_BUNDLE_BYTES:
        raise Invalid("a bundle needs a Content-Length of at most 64 MB")
    chunks, received = [], 0
    while received < length and (chunk := stream.read(min(CHUNK, length - received))):
        chunks.append(chunk)
        received += len(chunk)
    data = b"".join(chunks)
    if len(data) != length:
        raise Invalid(f"the bundle ended after {len(data)} of {length} bytes")

    def action():
        stored, uploads = 0, uploads_dir(org)
        with folders_closed(VolumeFolders(resolve_path.root)) as folders, \
                tarfile.open(fileobj=io.BytesIO(data), mode="r:") as bundle:
            for member in bundle:
                if not member.isfile():
                    raise Invalid(f"{member.name}: a bundle holds regular files only")
                path = clean_path(member.name, allow_root=False)
                resolve_path(path, allow_root=False)
                temp = receive_verified(uploads, bundle.extractfile(member), member.size,
                                member.pax_headers.get("DIV.sha256", ""))
                try:
                    _place(folders, path, temp)
                finally:
                    if os.path.exists(temp):
                        os.unlink(temp)
                stored += 1
        return stored
    try:
        return _share_errors(action)
    except tarfile.TarError as exc:
        raise Invalid(f"not a tar bundle: {exc}") from None


def _real_parts(org: Org, volume: str, path: str, follow_last: bool) -> tuple[str, str, str]:
    """(volume folder, parent, name) of a path with its symlinks resolved
    (the last one only with `follow_last`), the parent relative to the
    volume. Opening these through VolumeFolders then follows no link at
    all, so a link swapped in after this check is refused."""
    root, target = resolve(org, volume, path, allow_root=False)
    folder, name = os.path.split(target)
    real = os.path.realpath(target) if follow_last else os.path.join(os.path.realpath(folder), name)
    if not _inside(root, real) or real == root:
        raise Invalid(f"{clean_path(path)!r} leads out of the volume (a symlink)")
    parent_rel, _, name = os.path.relpath(real, root).replace(os.sep, "/").rpartition("/")
    return root, parent_rel, name


def open_for_download(org: Org, volume: str, path: str):
    """A file of the volume opened for reading, and its stat. Opened through
    the volume's folder descriptors with O_NOFOLLOW, so a symlink a run swaps
    in after the path was checked is refused, not followed; O_NONBLOCK, so a
    FIFO a run made cannot hang the server."""
    root, parent_rel, name = _real_parts(org, volume, path, follow_last=True)
    missing = NotFound(f"no file {clean_path(path)!r} in {volume}")
    with folders_closed(VolumeFolders(root)) as folders:
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                         dir_fd=folders.folder(parent_rel, create=False))
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise missing from None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise missing from None
            raise
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise missing
    return os.fdopen(fd, "rb"), info


def delete(org: Org, volume: str, path: str) -> None:
    """Deletes a file, link or folder, relative to its parent's descriptor:
    never through a symlink swapped in after the check. A link is deleted
    itself, not what it points to."""
    root, parent_rel, name = _real_parts(org, volume, path, follow_last=False)
    with folders_closed(VolumeFolders(root)) as folders:
        parent = folders.folder(parent_rel, create=False)
        try:
            mode = os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode
        except FileNotFoundError:
            raise NotFound(f"no {clean_path(path)!r} in {volume}") from None
        if stat.S_ISDIR(mode):
            shutil.rmtree(name, dir_fd=parent)
        else:
            os.unlink(name, dir_fd=parent)


def delete_volume(org: Org, volume: str) -> None:
    row = db.session.execute(db.select(Volume).filter_by(
        org_id=org.id, name=check_volume_name(volume))).scalar_one_or_none()
    if row is None:
        raise NotFound(f"no volume named {volume!r}")
    shutil.rmtree(volume_dir(org, volume), ignore_errors=True)
    db.session.delete(row)
    db.session.commit()
