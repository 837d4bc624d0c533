"""Files in volumes: every user path resolved inside its volume, uploads that
are never seen half written, listings, deletes. A volume is a folder on the
share (app/services/files/volumes.py); nothing here trusts a path a user sent.

An upload is written as an unnamed file (O_TMPFILE) in its own folder and
named once its sha256 matches the one the client sent; where the share has
no O_TMPFILE it lands in <org>/.uploads/ (on the same filesystem, never a
volume: a volume name cannot start with a dot) and is renamed into place.
The hash of a stored file is kept in an extended attribute with its size
and mtime, so that asking "does the volume already have this file?" does
not reread it; where the share has no user xattrs the file is hashed
again."""
from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import os
import secrets
import shutil
import stat
import tarfile
import time
from dataclasses import dataclass
from typing import cast

from sqlalchemy.engine import Result

from divergent.app.extensions import db
from divergent.app.models import Org, Volume
from divergent.app.services.durable import sync_filesystem, sync_folder
from divergent.app.services.errors import Conflict, Invalid, NotFound, ServiceError, Unavailable
from divergent.app.services.files.quota import charge, layout_bytes
from divergent.app.services.files.volumes import (
    check_volume_name,
    data_path,
    ensure_volume,
    org_dir,
    trees_dir,
    volume_dir,
)
from divergent.terms import shown

MAX_FILE_BYTES = 256 * 1000 * 1000   # the guide: at most 256 MB a file
MAX_FILE_SECONDS = 300               # and 5 minutes to upload it
MAX_BUNDLE_BYTES = 64 * 1000 * 1000
MAX_HASHES_BYTES = 8 << 20
CHUNK = 1 << 20
HASH_XATTR = "user.div.sha256"
MAX_PATH_BYTES = 4096   # PATH_MAX
MAX_DEPTH = 256         # folders below a volume that listings go into


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
        raise Invalid(f"'{shown(path)}': paths are relative to the volume, not absolute")
    try:
        # PEP 383's form (app/web/byte_paths.py): each lone surrogate is a byte.
        size = len(path.encode("utf-8", "surrogateescape"))
    except UnicodeEncodeError:
        raise Invalid("a path holds text that is not valid Unicode") from None
    if size > MAX_PATH_BYTES:
        raise Invalid(f"a path in a volume is at most {MAX_PATH_BYTES} bytes")
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise Invalid(f"'{shown(path)}': .. is not allowed in a volume path")
    if any(len(p.encode("utf-8", "surrogateescape")) > 255 for p in parts):
        raise Invalid("a file or folder name is at most 255 bytes")
    if not parts and not allow_root:
        raise Invalid("name a file or folder in the volume")
    return "/".join(parts)


class VolumeFolders:
    """A volume's folders, opened a component at a time with O_NOFOLLOW
    relative to the folder above, from the volume's own descriptor: no
    server-side open, stat, list or delete in a volume ever follows a link,
    even one a run swaps in between a check and the use. The descriptors
    are kept for the request, so 10,000 files in 100 folders open 100;
    at most MAX_OPEN at once, so no volume's shape can use up the server's
    descriptors (a descriptor is used at once, never kept across calls)."""

    FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    MAX_OPEN = 128

    def __init__(self, root: str):
        self._fds = {"": os.open(root, self.FLAGS)}

    def folder(self, rel: str, create: bool = False) -> int:
        fd = self._fds.get(rel)
        if fd is not None:
            return fd
        parts = rel.split("/")
        known = max(i for i in range(len(parts) + 1) if "/".join(parts[:i]) in self._fds)
        fd = self._fds["/".join(parts[:known])]
        for depth in range(known + 1, len(parts) + 1):
            fd = self._open_child(fd, parts[depth - 1], "/".join(parts[:depth]), create)
        return fd

    def _open_child(self, parent: int, name: str, rel: str, create: bool) -> int:
        if create:
            try:
                os.mkdir(name, dir_fd=parent)
            except FileExistsError:
                pass
        try:
            fd = os.open(name, self.FLAGS, dir_fd=parent)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise Invalid(f"'{shown(rel)}' is a symlink or a file, not a folder of the volume; "
                              "links in a volume are never followed") from None
            if exc.errno == errno.ENOENT:
                raise NotFound(f"no '{shown(rel)}' in the volume") from None
            raise
        if len(self._fds) >= self.MAX_OPEN:
            self._forget_all_but(parent)
        self._fds[rel] = fd
        return fd

    def _forget_all_but(self, keep: int) -> None:
        for rel, fd in list(self._fds.items()):
            if rel and fd != keep:
                os.close(fd)
                del self._fds[rel]

    def lstat(self, rel: str) -> os.stat_result | None:
        """The entry itself (a link is a link), or None if there is none."""
        if not rel:
            return os.fstat(self._fds[""])
        parent_rel, _, name = rel.rpartition("/")
        try:
            return os.stat(name, dir_fd=self.folder(parent_rel), follow_symlinks=False)
        except FileNotFoundError:
            return None

    def open_file(self, rel: str) -> tuple[int, os.stat_result] | None:
        """A regular file opened for reading, or None: O_NOFOLLOW so a link is
        refused, O_NONBLOCK so a FIFO a run made cannot hang the server, and
        the type checked on the open descriptor (no FIFOs, devices, links)."""
        parent_rel, _, name = rel.rpartition("/")
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                         dir_fd=self.folder(parent_rel))
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError, NotFound):
            return None
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENXIO):
                return None
            raise
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            os.close(fd)
            return None
        return fd, info

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


@contextlib.contextmanager
def folders_closed(folders: VolumeFolders):
    try:
        yield folders
    finally:
        folders.close()


def open_volume(org: Org, volume: str) -> VolumeFolders:
    """The volume's folders, from its own descriptor. The share, the org's
    folder and the volume's are made by the server alone (runs see only
    inside volumes), so the path up to the volume holds no link of theirs."""
    if not os.path.isdir(data_path("share")):
        raise Unavailable("the share is not available (not mounted?); "
                          "nothing already stored was lost")
    try:
        return VolumeFolders(volume_dir(org, volume))
    except (FileNotFoundError, NotADirectoryError):
        raise NotFound(f"no volume named {volume!r}") from None


def _entry(rel: str, st: os.stat_result) -> Entry | None:
    """A file or folder as listed; anything else (links, FIFOs, devices) is
    left out."""
    if stat.S_ISDIR(st.st_mode):
        return Entry(rel, "dir", 0, st.st_mtime)
    if stat.S_ISREG(st.st_mode):
        return Entry(rel, "file", st.st_size, st.st_mtime)
    return None


def _children(fd: int, rel: str):
    """(name, relative path, stat) of what is in the open folder `fd`, each
    stat'ed relative to it without following links."""
    for name in os.listdir(fd):
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            continue   # gone since it was listed
        yield name, f"{rel}/{name}" if rel else name, st


def _walk_files(folders: VolumeFolders, top: str):
    """Regular files under the folder `top`, by descriptor all the way and
    without recursion: a folder at a time from VolumeFolders' bounded set,
    MAX_DEPTH folders deep at most, whatever shape a run gave the volume."""
    pending = [top]
    while pending:
        folder = pending.pop()
        try:
            fd = folders.folder(folder)
        except (Invalid, NotFound):
            continue   # swapped for a link or gone while walking: not followed
        deep_enough = folder.count("/") + 1 >= MAX_DEPTH
        for _, rel, st in list(_children(fd, folder)):
            if stat.S_ISDIR(st.st_mode) and not deep_enough:
                pending.append(rel)
            elif stat.S_ISREG(st.st_mode):
                yield _entry(rel, st)


def _remove_tree(parent: int, name: str) -> None:
    """Deletes the folder `name` of the open folder `parent` and all in it,
    through descriptors and without recursion: each pass moves what its
    subfolders hold up into it, so no depth costs more than two open
    folders (shutil.rmtree holds one a level, and recurses)."""
    fd = os.open(name, VolumeFolders.FLAGS, dir_fd=parent)
    try:
        while True:
            subfolders = []
            for entry, _, st in list(_children(fd, "")):
                if stat.S_ISDIR(st.st_mode):
                    subfolders.append(entry)
                else:
                    os.unlink(entry, dir_fd=fd)
            if not subfolders:
                break
            for sub in subfolders:
                sub_fd = os.open(sub, VolumeFolders.FLAGS, dir_fd=fd)
                try:
                    for child in os.listdir(sub_fd):
                        os.rename(child, f".div-rm-{secrets.token_hex(8)}", src_dir_fd=sub_fd,
                                  dst_dir_fd=fd)
                finally:
                    os.close(sub_fd)
                os.rmdir(sub, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent)


def list_path(org: Org, volume: str, path: str, recursive: bool = False) -> tuple[Entry, list[Entry]]:
    """The entry at `path` and what is in it: its children, or with
    `recursive` every file below it."""
    rel = clean_path(path)
    with folders_closed(open_volume(org, volume)) as folders:
        st = folders.lstat(rel)
        top = _entry(rel, st) if st is not None else None
        if st is not None and stat.S_ISLNK(st.st_mode):
            raise Invalid(f"'{shown(rel)}' is a symlink; links in a volume are never followed")
        if top is None:
            raise NotFound(f"no '{shown(rel)}' in {volume}")
        if top.type == "file":
            return top, [top]
        if recursive:
            return top, sorted(_walk_files(folders, rel), key=lambda e: e.path)
        children = [_entry(child, st) for _, child, st in _children(folders.folder(rel), rel)]
        return top, sorted((c for c in children if c), key=lambda e: e.path)


def volume_summaries(org: Org) -> list[dict]:
    rows: Result[Volume] = db.session.execute(
        db.select(Volume).filter_by(org_id=org.id).order_by(Volume.name))
    summaries = []
    for volume in rows.scalars():
        try:
            with folders_closed(open_volume(org, volume.name)) as folders:
                files = list(_walk_files(folders, ""))
        except NotFound:
            files = []
        # `div run` keeps a project's code trees under code/ in a volume of their own.
        code = bool(files) and all(f.path.startswith("code/") for f in files)
        summaries.append({"name": volume.name, "size": sum(f.size for f in files),
                          "files": len(files), "created_at": volume.created_at.isoformat(),
                          "code": code})
    return summaries


def _cached_hash(fd: int, st: os.stat_result) -> str | None:
    try:
        mtime, size, sha = os.getxattr(fd, HASH_XATTR).decode().split()
    except (OSError, ValueError):
        return None
    return sha if (int(mtime), int(size)) == (st.st_mtime_ns, st.st_size) else None


def _remember_hash(fd: int, sha: str) -> None:
    """Keeps the hash with the size and mtime it is true for, on the open
    file. A rename keeps both."""
    st = os.fstat(fd)
    try:
        os.setxattr(fd, HASH_XATTR, f"{st.st_mtime_ns} {st.st_size} {sha}".encode())
    except OSError:
        pass   # a share without user xattrs: the file is hashed when asked


def _stored_hash(fd: int, st: os.stat_result) -> str:
    sha = _cached_hash(fd, st)
    if sha is None:
        digest = hashlib.sha256()
        while chunk := os.read(fd, CHUNK):
            digest.update(chunk)
        sha = digest.hexdigest()
        _remember_hash(fd, sha)
    return sha


def _refuse_code_tree(org: Org, volume: str, rel: str) -> None:
    """Code trees are immutable once stored: no upload lands inside one."""
    parts = rel.split("/")
    if len(parts) >= 2 and parts[0] == "code" and \
            os.path.isdir(os.path.join(trees_dir(org), volume, parts[1])):
        raise Conflict(f"{rel}: code/{parts[1]} is uploaded code, which is never changed "
                       "(div run uploads a new tree when the code changes)")


def files_to_send(org: Org, volume: str, files: object) -> list[str]:
    """Creates the volume if needed; returns the paths whose size and hash the
    volume does not already have."""
    if not isinstance(files, list):
        raise Invalid("files must be a list of {path, size, sha256}")
    ensure_volume(org, check_volume_name(volume))
    db.session.commit()
    wanted = []
    with folders_closed(open_volume(org, volume)) as folders:
        for item in files:
            if not isinstance(item, dict):
                raise Invalid("files must be a list of {path, size, sha256}")
            rel = clean_path(item.get("path"), allow_root=False)
            _refuse_code_tree(org, volume, rel)
            if not _already_there(folders, rel, item):
                wanted.append(item["path"])
    return wanted


def _already_there(folders: VolumeFolders, rel: str, item: dict) -> bool:
    try:
        opened = folders.open_file(rel)
    except Invalid:
        raise Invalid(f"'{shown(rel)}' leads through a symlink; links in a volume are never followed") \
            from None
    if opened is None:
        return False
    fd, st = opened
    try:
        return st.st_size == item.get("size") and _stored_hash(fd, st) == item.get("sha256")
    finally:
        os.close(fd)


# What a run writing in the same folder at the same moment leaves a write or
# a delete with, once the volume is open (a share that is not mounted is
# found before): a folder that went or filled up, a name that became a file
# or a folder.
RACED = (errno.ENOENT, errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR, errno.EBUSY)


@contextlib.contextmanager
def _inside_the_volume(path: str):
    """What is in a volume runs make and change as they like (its folders'
    modes included, at any moment): a place there the server may not write
    is that place's state, 409, never the share refusing the server (which
    is an admin's to fix, 503)."""
    try:
        yield
    except PermissionError as exc:
        # Raised by the OS for a file call (nothing here raises one of its own), so with an errno.
        raise Conflict(f"the server may not write to '{shown(path)}' in the volume "
                       f"({os.strerror(cast(int, exc.errno))}): a run may have changed it; "
                       "nothing already stored was lost") from None


def _share_errors(action):
    """Disk full and a share that is gone as clear errors; the temporary file
    goes, and nothing already stored is touched."""
    try:
        return action()
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise ShareFull("the share is full: the file was not stored; "
                            "nothing already stored was lost") from None
        if exc.errno in (errno.ESTALE, errno.EIO, errno.ENOTCONN):
            raise Unavailable(f"the share is not available ({os.strerror(exc.errno)}); "
                              "nothing already stored was lost") from None
        if exc.errno in RACED:
            raise Conflict("a run changed that place in the volume meanwhile "
                           f"({os.strerror(exc.errno)}); try again") from None
        raise


def uploads_dir(org: Org) -> str:
    uploads = os.path.join(org_dir(org), ".uploads")
    os.makedirs(uploads, exist_ok=True)
    return uploads


_last_swept: dict[str, float] = {}


def sweep_stale_parts(folder: str) -> None:
    """Deletes what uploads killed mid-way left behind: a part older than
    twice the longest an upload may take is no one's any more. A folder is
    looked at once a minute at most, not once a file: a bundle of 10,000
    small files would otherwise list the folder 10,000 times."""
    now = time.time()
    if now - _last_swept.get(folder, 0.0) < 60:
        return
    _last_swept[folder] = now
    stale = now - 2 * MAX_FILE_SECONDS
    with os.scandir(folder) as entries:
        for entry in entries:
            # A part listed here may be renamed into place by its upload
            # before it is looked at: gone is fine, not a 500.
            with contextlib.suppress(FileNotFoundError):
                if entry.name.endswith(".part") and entry.name.startswith(".") and \
                        entry.is_file(follow_symlinks=False) and \
                        entry.stat(follow_symlinks=False).st_mtime < stale:
                    os.unlink(entry.path)


def receive_verified(folder: str, stream, length: int | None, sha256: str,
                     sync: bool = True) -> str:
    """Writes the stream to a temporary file in `folder`, within the limits
    (256 MB, 5 minutes), checks its hash and records it (_remember_hash's
    xattr, set on the open file so no second open is needed); returns the
    temporary path, for the caller to rename into place. Code blobs arrive
    through here, and volume files where the share has no O_TMPFILE.
    `sync`: the bytes are on disk before it returns (a caller that stores
    many files syncs them at once)."""
    sweep_stale_parts(folder)
    temp = os.path.join(folder, f".{secrets.token_hex(8)}.part")
    try:
        with open(temp, "wb") as out:
            _write_verified(out.fileno(), stream, length, sha256, sync)
        return temp
    except BaseException:
        if os.path.exists(temp):
            os.unlink(temp)
        raise


def _write_verified(fd: int, stream, length: int | None, sha256: str, sync: bool) -> None:
    """The stream into `fd` within the limits, hashed as it goes through one
    buffer (readinto: no new bytes object a chunk); Invalid unless it is
    whole and its sha256 is `sha256`, which is then kept on the file."""
    if length is not None and length > MAX_FILE_BYTES:
        raise Invalid(f"a file may be at most 256 MB ({length / 1e6:.0f} MB sent)")
    deadline = time.monotonic() + MAX_FILE_SECONDS
    digest, size = hashlib.sha256(), 0
    # As large as the file, up to CHUNK: a 4 KiB file of a bundle does not
    # get (and zero) a 1 MiB buffer.
    view = memoryview(bytearray(CHUNK if length is None else max(1, min(CHUNK, length))))
    while received := stream.readinto(view):
        size += received
        if size > MAX_FILE_BYTES:
            raise Invalid("a file may be at most 256 MB")
        if time.monotonic() > deadline:
            raise Invalid("a file must finish uploading within 5 minutes")
        digest.update(view[:received])
        _write_all(fd, view[:received])
    if length is not None and size != length:
        raise Invalid(f"the upload ended after {size} of {length} bytes")
    if digest.hexdigest() != sha256:
        raise Invalid("the file's bytes do not match the sha256 sent with it")
    _remember_hash(fd, sha256)
    if sync:
        os.fsync(fd)


def _write_all(fd: int, data: memoryview) -> None:
    while data:
        data = data[os.write(fd, data):]


def _refuse_folder(parent: int, name: str, path: str) -> None:
    try:
        if stat.S_ISDIR(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode):
            raise Conflict(f"{path} is a folder in the volume")
    except FileNotFoundError:
        pass


def _place(folders: VolumeFolders, path: str, temp: str, sync: bool) -> None:
    """Renames the verified temporary file to `path`, never through a link;
    with `sync`, the rename is on disk before it returns."""
    parent_rel, _, name = path.rpartition("/")
    parent = folders.folder(parent_rel, create=True)
    _refuse_folder(parent, name, path)
    os.replace(temp, name, dst_dir_fd=parent)   # replaces a link itself, never its target
    if sync:
        sync_folder(parent)


def _open_unnamed(parent: int) -> int | None:
    """A new file in the folder with no name yet (O_TMPFILE): nothing a run
    or a listing can see, nothing left behind by a crash, and named in its
    own folder, where a rename from .uploads locks two folders at once (half
    of a small-file bundle's time, measured). None where the share has no
    O_TMPFILE (NFS)."""
    try:
        return os.open(".", os.O_TMPFILE | os.O_WRONLY | os.O_CLOEXEC, 0o666, dir_fd=parent)
    except OSError as exc:
        if exc.errno in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
            return None
        raise


def _name_unnamed(fd: int, parent: int, name: str, org: Org) -> None:
    """Names the whole, verified unnamed file: a link if the name is new; a
    file already there is replaced whole, by a rename from a temporary name
    in the org's .uploads (a rename replaces a link itself, never its
    target), where the sweep finds it if the server dies in between."""
    source = f"/proc/self/fd/{fd}"
    try:
        os.link(source, name, dst_dir_fd=parent)
        return
    except FileExistsError:
        pass
    uploads = uploads_dir(org)
    sweep_stale_parts(uploads)    # what a server killed between these two steps left
    temp = f".{secrets.token_hex(8)}.part"
    # With a folder descriptor os.link is linkat(AT_SYMLINK_FOLLOW), which
    # links the open file; on a path it is link(2), which would link /proc's
    # own entry (EXDEV).
    folder = os.open(uploads, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.link(source, temp, dst_dir_fd=folder)
        try:
            os.replace(temp, name, src_dir_fd=folder, dst_dir_fd=parent)
        except BaseException:
            with contextlib.suppress(OSError):    # the rename's error is the one to say
                os.unlink(temp, dir_fd=folder)
            raise
    finally:
        os.close(folder)


def _store_verified(org: Org, folders: VolumeFolders, volume: str, path: str, stream,
                    length: int | None, sha256: str, sync: bool = True) -> None:
    rel = clean_path(path, allow_root=False)
    _refuse_code_tree(org, volume, rel)
    parent_rel, _, name = rel.rpartition("/")
    parent = folders.folder(parent_rel, create=True)   # a link refused before a byte is read
    fd = _open_unnamed(parent)
    if fd is None:
        temp = receive_verified(uploads_dir(org), stream, length, sha256, sync)
        try:
            _place(folders, rel, temp, sync)
        finally:
            if os.path.exists(temp):
                os.unlink(temp)
        return
    try:
        _write_verified(fd, stream, length, sha256, sync)
        _refuse_folder(parent, name, rel)
        _name_unnamed(fd, parent, name, org)
    finally:
        os.close(fd)
    if sync:
        sync_folder(parent)


def store_file(org: Org, volume: str, path: str, stream, length: int | None,
               sha256: str) -> None:
    def action():
        with folders_closed(open_volume(org, volume)) as folders:
            # Charged once the volume is there: a put to none costs nothing.
            charge(org, min(length or 0, MAX_FILE_BYTES))
            with _inside_the_volume(path):
                _store_verified(org, folders, volume, path, stream, length, sha256)
    _share_errors(action)


def store_bundle(org: Org, volume: str, stream, length: int | None) -> int:
    """Many small files in one request: a tar of at most 64 MB with every
    member's sha256, by name, in one global pax header (DIV.sha256s, a JSON
    object), or (as CLIs before it sent) in the member's own pax header
    (DIV.sha256): one header a member instead of two halves the time spent
    reading them (tarfile's headers were 40% of a bundle's). It is read whole
    first (tarfile's stream mode reads the socket 10 KB at a time), then each
    member is checked and renamed into place on its own, so a bundle cut
    short leaves whole files only."""
    open_volume(org, volume).close()
    if length is None or length > MAX_BUNDLE_BYTES:
        raise Invalid("a bundle needs a Content-Length of at most 64 MB")
    charge(org, length)
    chunks, received = [], 0
    while received < length and (chunk := stream.read(min(CHUNK, length - received))):
        chunks.append(chunk)
        received += len(chunk)
    data = b"".join(chunks)
    if len(data) != length:
        raise Invalid(f"the bundle ended after {len(data)} of {length} bytes")

    def action():
        stored = 0
        with folders_closed(open_volume(org, volume)) as folders, \
                tarfile.open(fileobj=io.BytesIO(data), mode="r:") as bundle:
            header = bundle.pax_headers.get("DIV.sha256s")   # read with the first member
            hashes = _bundle_hashes(header)
            # Its folders and names too, before any is made (the bytes were
            # charged from its length).
            charge(org, layout_bytes(bundle.getnames()))
            for member in bundle:
                if bundle.pax_headers.get("DIV.sha256s") is not header:
                    raise Invalid("a bundle's DIV.sha256s header comes before its files")
                if not member.isfile():
                    raise Invalid(f"{member.name}: a bundle holds regular files only")
                if member.issparse():
                    # Its size would be written out as holes: far more than was sent.
                    raise Invalid(f"{member.name}: a bundle holds no sparse files")
                sha = member.pax_headers.get("DIV.sha256") or hashes.get(member.name, "")
                with _inside_the_volume(member.name):
                    _store_verified(org, folders, volume, member.name,
                                    bundle.extractfile(member), member.size, sha, sync=False)
                stored += 1
        sync_filesystem(volume_dir(org, volume))   # all of it on disk before the answer
        return stored
    try:
        return _share_errors(action)
    except (tarfile.TarError, ValueError) as exc:    # ValueError: a pax header tarfile chokes on
        raise Invalid(f"not a tar bundle: {exc}") from None


def _bundle_hashes(header: str | None) -> dict:
    """The global DIV.sha256s header as path: sha256, {} without one: the
    CLI's 1,000 files a bundle with paths of at most 4,096 bytes take 4.2 MB
    at most, and a larger one would hold a worker while it is parsed."""
    raw = header or "{}"
    if len(raw) > MAX_HASHES_BYTES:
        raise Invalid("a bundle's DIV.sha256s header may be at most 8 MiB")
    try:
        hashes = json.loads(raw)
    except (ValueError, RecursionError):
        hashes = None
    if not isinstance(hashes, dict):
        raise Invalid("a bundle's DIV.sha256s header is a JSON object of path: sha256")
    return hashes


def open_for_download(org: Org, volume: str, path: str):
    """A regular file of the volume opened for reading, its stat and its
    sha256 (for the client to check what it received), through the volume's
    folder descriptors (VolumeFolders.open_file): a link or a FIFO a run
    made is a 404, never followed or waited on."""
    rel = clean_path(path, allow_root=False)
    with folders_closed(open_volume(org, volume)) as folders:
        opened = folders.open_file(rel)
    if opened is None:
        raise NotFound(f"no file '{shown(rel)}' in {volume}")
    fd, info = opened
    sha = _stored_hash(fd, info)
    os.lseek(fd, 0, os.SEEK_SET)
    return os.fdopen(fd, "rb"), info, sha


def delete(org: Org, volume: str, path: str) -> None:
    """Deletes a file, link or folder relative to its parent's descriptor,
    never through a link: a link is deleted itself, wherever it points."""
    rel = clean_path(path, allow_root=False)
    parent_rel, _, name = rel.rpartition("/")

    def action():
        with folders_closed(open_volume(org, volume)) as folders, _inside_the_volume(rel):
            parent = folders.folder(parent_rel)
            st = folders.lstat(rel)
            if st is None:
                raise NotFound(f"no '{shown(rel)}' in {volume}")
            try:
                if stat.S_ISDIR(st.st_mode):
                    _remove_tree(parent, name)
                else:
                    os.unlink(name, dir_fd=parent)
            except FileNotFoundError:
                pass        # a run deleted it first: gone all the same
    _share_errors(action)


def delete_volume(org: Org, volume: str) -> None:
    """The volume, its folder and the code trees stored for it."""
    row = db.session.execute(db.select(Volume).filter_by(
        org_id=org.id, name=check_volume_name(volume))).scalar_one_or_none()
    if row is None:
        raise NotFound(f"no volume named {volume!r}")
    org_fd = os.open(org_dir(org), VolumeFolders.FLAGS)
    try:
        _remove_tree(org_fd, volume)
    except FileNotFoundError:
        pass
    finally:
        os.close(org_fd)
    shutil.rmtree(os.path.join(trees_dir(org), volume), ignore_errors=True)
    db.session.delete(row)
    db.session.commit()
