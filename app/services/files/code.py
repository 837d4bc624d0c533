"""Code uploads, content-addressed (docs/developers/design.md, "A run, end
to end"): the CLI sends a manifest of (path, sha256, size, mode); the server
answers which blobs its org lacks; once it has them all, the tree is laid out once, named
by the hash of the manifest (<volume>/code/<hash8>). Unchanged code sends no
bytes and reuses the tree already laid out.

The tree runs copy into /workspace lives where only the server writes
(volumes.trees_dir); the volume gets a copy at code/<hash8> for people to
browse, and runs see the stored trees read-only at /mnt/<volume>/code.

Work is bounded by the bytes sent, however the manifest names them: a tree's
files are hard links to the org's immutable blobs (a blob named 50 times is
stored once), and the volume's copy holds each distinct file once, its
other names linked to it."""
from __future__ import annotations

import errno
import hashlib
import os
import posixpath
import re
import secrets
import shutil
from dataclasses import dataclass

from divergent.app.models import Org
from divergent.app.services.durable import sync_filesystem, sync_folder
from divergent.app.services.errors import Invalid
from divergent.app.services.files.quota import charge, layout_bytes
from divergent.app.services.files.storage import (
    MAX_FILE_BYTES,
    VolumeFolders,
    folders_closed,
    receive_verified,
    uploads_dir,
)
from divergent.app.services.files.volumes import data_path, ensure_volume, trees_dir

SHA256 = re.compile(r"^[0-9a-f]{64}$")
MAX_FILES = 100_000


@dataclass(frozen=True)
class FileEntry:
    path: str
    sha256: str
    size: int
    executable: bool


@dataclass(frozen=True)
class Tree:
    ref: str        # <volume>/code/<hash8>
    path: str       # the folder on the share
    files: int
    bytes: int


class MissingBlobs(Exception):
    def __init__(self, missing: list[str]):
        super().__init__(f"{len(missing)} blobs missing")
        self.missing = missing


def _check_path(path: object) -> str:
    if (not isinstance(path, str) or not path or "\0" in path or path.startswith("/")
            or "\\" in path or posixpath.normpath(path) != path
            or any(part in ("", ".", "..") for part in path.split("/"))):
        raise Invalid(f"invalid file path in the manifest: {path!r}")
    return path


def parse_manifest(files: object) -> list[FileEntry]:
    if not isinstance(files, list) or not files:
        raise Invalid("the manifest lists no files")
    if len(files) > MAX_FILES:
        raise Invalid(f"at most {MAX_FILES} files a run")
    entries, seen = [], set()
    for item in files:
        if not isinstance(item, dict):
            raise Invalid("each manifest entry is an object with path, sha256, size, executable")
        path = _check_path(item.get("path"))
        sha, size = item.get("sha256"), item.get("size")
        if not isinstance(sha, str) or not SHA256.fullmatch(sha):
            raise Invalid(f"{path}: sha256 must be 64 lowercase hex digits")
        if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size <= MAX_FILE_BYTES:
            raise Invalid(f"{path}: size must be 0 to {MAX_FILE_BYTES} bytes")
        if path in seen:
            raise Invalid(f"{path} is listed twice")
        seen.add(path)
        entries.append(FileEntry(path, sha, size, bool(item.get("executable"))))
    # A file and a folder of the same name cannot both exist.
    folders = {posixpath.dirname(e.path) for e in entries}
    for folder in list(folders):
        while folder:
            if folder in seen:
                raise Invalid(f"{folder} is both a file and a folder")
            folder = posixpath.dirname(folder)
    return sorted(entries, key=lambda e: e.path)


def tree_hash(entries: list[FileEntry]) -> str:
    digest = hashlib.sha256()
    for e in entries:
        digest.update(f"{'x' if e.executable else '-'} {e.sha256} {e.size} {e.path}\n".encode())
    return digest.hexdigest()


def _blob_path(org: Org, sha: str) -> str:
    return data_path("blobs", org.name, sha[:2], sha)


def missing_blobs(org: Org, entries: list[FileEntry]) -> list[str]:
    return sorted({e.sha256 for e in entries if not os.path.exists(_blob_path(org, e.sha256))})


def store_blob(org: Org, sha: str, stream, length: int | None) -> None:
    """Stores a blob once its bytes match its name: a half-sent or wrong blob
    is never taken for a whole one."""
    if not SHA256.fullmatch(sha):
        raise Invalid("a blob is named by its sha256: 64 lowercase hex digits")
    charge(org, min(length or 0, MAX_FILE_BYTES))
    final = _blob_path(org, sha)
    os.makedirs(os.path.dirname(final), exist_ok=True)
    os.replace(receive_verified(os.path.dirname(final), stream, length, sha), final)
    folder = os.open(os.path.dirname(final), os.O_RDONLY | os.O_DIRECTORY)
    try:
        sync_folder(folder)
    finally:
        os.close(folder)


def lay_out_tree(org: Org, volume: str, entries: list[FileEntry]) -> Tree:
    """The tree <volume>/code/<hash8>, laid out once from the org's blobs.
    Raises MissingBlobs when the server lacks some."""
    missing = missing_blobs(org, entries)
    if missing:
        raise MissingBlobs(missing)
    sizes = _blob_sizes(org, entries)
    full = tree_hash(entries)
    volume_path = ensure_volume(org, volume)
    root = os.path.join(trees_dir(org), volume)
    os.makedirs(root, exist_ok=True)
    name = _tree_name(root, full)
    target = os.path.join(root, name)
    if not os.path.isdir(target):
        # The tree links the blobs; the volume's copy holds each once more;
        # both make every folder and name the manifest lists.
        charge(org, sum(sizes.values()) + 2 * layout_bytes([e.path for e in entries]))
        _build(org, entries, root, target, full)
    _show_in_volume(org, volume_path, name, target)
    return Tree(f"{volume}/code/{name}", target, len(entries), sum(e.size for e in entries))


def _blob_sizes(org: Org, entries: list[FileEntry]) -> dict[str, int]:
    """Each distinct blob's size on disk; Invalid when the manifest says
    another (what is charged and copied is what is stored, never a claim)."""
    sizes = {sha: os.stat(_blob_path(org, sha)).st_size for sha in {e.sha256 for e in entries}}
    for e in entries:
        if sizes[e.sha256] != e.size:
            raise Invalid(f"{e.path}: its blob has {sizes[e.sha256]} bytes, not {e.size}")
    return sizes


def stored_tree(org: Org, ref: str) -> str | None:
    """The server's own folder of the tree a run names (`<volume>/code/<name>`,
    already checked by its pattern), or None: what a run may have made in a
    volume is never taken for code."""
    volume, _, name = ref.partition("/code/")
    path = os.path.join(trees_dir(org), volume, name)
    return path if os.path.isdir(path) else None


def _tree_name(root: str, full: str) -> str:
    """hash8, longer in the rare case another tree already has that name.
    The full hash of each tree is kept beside it in .<name>.tree."""
    for length in range(8, 65, 4):
        marker = os.path.join(root, f".{full[:length]}.tree")
        if not os.path.exists(marker):
            return full[:length]
        with open(marker) as f:
            if f.read().strip() == full:
                return full[:length]
    raise AssertionError("unreachable: the full hash names its tree")


class Linker:
    """Lays files out as hard links, one copy of each distinct (content,
    mode) made by `first`, then linked; a copy past the filesystem's link
    limit (ext4: 65,000) starts anew, so even 100,000 names of one file cost
    two copies, never 100,000."""

    def __init__(self):
        self._sources: dict[tuple[str, bool], str] = {}

    def place(self, key: tuple[str, bool], dest: str, first) -> None:
        source = self._sources.get(key)
        if source is not None:
            try:
                os.link(source, dest)
                return
            except OSError as exc:
                if exc.errno != errno.EMLINK:
                    raise
        first(dest)
        self._sources[key] = dest


def _link_or_copy(source: str, dest: str) -> None:
    try:
        os.link(source, dest)
    except OSError as exc:
        if exc.errno != errno.EMLINK:
            raise
        shutil.copy2(source, dest)


def _blob_face(org: Org, sha: str, executable: bool) -> str:
    """The blob as a tree's file of that mode: the blob itself (0644), or
    beside it once, as <sha>.x (0755), for executable files. Blobs are never
    written again once stored, so trees may share them."""
    blob = _blob_path(org, sha)
    if not executable:
        if os.stat(blob).st_mode & 0o777 != 0o644:
            os.chmod(blob, 0o644)
        return blob
    face = blob + ".x"
    if not os.path.exists(face):
        temp = f"{face}.{secrets.token_hex(4)}"
        shutil.copyfile(blob, temp)
        os.chmod(temp, 0o755)
        os.replace(temp, face)
    return face


def _build(org: Org, entries: list[FileEntry], root: str, target: str, full: str) -> None:
    temp = os.path.join(root, f".tmp-{full[:8]}-{secrets.token_hex(4)}")
    linker = Linker()
    try:
        for e in entries:
            dest = os.path.join(temp, e.path)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            face = _blob_face(org, e.sha256, e.executable)
            linker.place((e.sha256, e.executable), dest,
                         lambda d, face=face: _link_or_copy(face, d))
        with open(os.path.join(root, f".{os.path.basename(target)}.tree"), "w") as f:
            f.write(full + "\n")
        sync_filesystem(root)   # a tree is complete on disk before runs are given it
        try:
            os.rename(temp, target)
        except OSError:
            if not os.path.isdir(target):   # else another request laid it out first
                raise
        sync_filesystem(root)
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def _show_in_volume(org: Org, volume_path: str, name: str, tree: str) -> None:
    """A copy of the tree at <volume>/code/<name> for people to browse,
    renamed into place through descriptors opened without following links:
    runs can write to the volume, and a `code` they made a link is refused."""
    with folders_closed(VolumeFolders(volume_path)) as folders:
        try:
            code = folders.folder("code", create=True)
        except Invalid:
            return   # `code` is a file or a link there: nothing to browse, runs never use it
        try:
            os.stat(name, dir_fd=code, follow_symlinks=False)
            return
        except FileNotFoundError:
            pass
        temp = os.path.join(uploads_dir(org), f".tree-{secrets.token_hex(8)}")
        try:
            _copy_once_each(tree, temp)
            os.rename(temp, name, dst_dir_fd=code)
        except OSError:
            pass   # shown already (a request at the same moment) or not at all: runs never use it
        finally:
            shutil.rmtree(temp, ignore_errors=True)


def _copy_once_each(tree: str, dest: str) -> None:
    """A copy of the tree in which files that are one inode in the tree (one
    blob under several names) are one file again, linked: runs may write in
    the volume, so it never shares an inode with the tree itself."""
    linker = Linker()
    for folder, _, files in os.walk(tree):
        into = os.path.join(dest, os.path.relpath(folder, tree))
        os.makedirs(into, exist_ok=True)
        for name in files:
            source = os.path.join(folder, name)
            info = os.stat(source, follow_symlinks=False)
            linker.place((str(info.st_ino), False), os.path.join(into, name),
                         lambda d, source=source: shutil.copy2(source, d))
