"""`div storage put|ls|get|rm`: files on and off the org's volumes
(docs/users/storage.md)."""
from __future__ import annotations

import hashlib
import io
import json
import os
import sys
import tarfile
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Self, TypeVar

import click

from divergent.cli.api import ApiClient, ApiError
from divergent.cli.complete import volume_names
from divergent.cli.context import pass_api
from divergent.cli.flags import parse_volume
from divergent.cli.hash_cache import HashCache
from divergent.cli.output import count, print_json, started, table
from divergent.cli.progress import Progress
from divergent.cli.upload import LocalFile, hash_file, refuse_too_large, regular_files, stat_files, walk_files
from divergent.terms import format_bytes, shown

PARALLEL = 8
# Small files travel many to a request, as one tar stream: a request per
# 4 KiB file would cost more in round trips than in bytes.
SMALL_FILE = 1 << 20
BUNDLE_BYTES = 16 << 20
BUNDLE_FILES = 1000
PLAN_BATCH = 5000
GROUP_BYTES = 64 << 20
GROUP_FILES = 64
# A bundle keeps a server thread busy with many small syscalls: two at a
# time (one per server worker) went as fast as four or eight, measured.
BUNDLES_AT_ONCE = 2

T = TypeVar("T")


@click.group("storage")
def storage() -> None:
    """Move files on and off the org's volumes, which runs see at /mnt/<volume>."""


def _volume(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """VOLUME, which comes before the path (LOCAL, for put): a path given
    first says so."""
    if value is not None and "/" in value:
        then = ctx.command.params[1].human_readable_name
        raise click.BadParameter(f"{value!r} is not a volume's name (a name has no /); the "
                                 f"volume comes first: div storage {ctx.info_name} VOLUME {then}",
                                 param_hint="VOLUME")
    return None if value is None else parse_volume(value, hint="VOLUME")


def _batches(items: list[T], size_of: Callable[[T], int], max_bytes: int,
             max_items: int) -> list[list[T]]:
    """Consecutive items, as many a batch as fit in max_bytes and max_items
    (an item larger than max_bytes alone)."""
    batches: list[list[T]] = []
    current: list[T] = []
    size = 0
    for item in items:
        if current and (size + size_of(item) > max_bytes or len(current) >= max_items):
            batches.append(current)
            current, size = [], 0
        current.append(item)
        size += size_of(item)
    return batches + ([current] if current else [])


@storage.command("put")
@click.argument("volume", callback=_volume, shell_complete=volume_names)
@click.argument("local", type=click.Path(exists=True, path_type=Path))
@pass_api
def put(api: ApiClient, volume: str, local: Path) -> None:
    """Upload LOCAL (a file or a folder) to VOLUME, creating the volume if it
    does not exist. A folder lands under its own name:

      div storage put training-data ./data   ->  /mnt/training-data/data/

    Files the volume already has (same size and sha256) are skipped, so an
    interrupted put finishes when run again. At most 256 MB a file."""
    local = local.resolve()
    if local.is_dir():
        root, base = local, local.name
        stats = regular_files(root, walk_files(root, excluded=False))
        if not stats:
            raise click.UsageError(f"{local} has no files to upload")
    else:
        root, base = local.parent, ""
        stats = stat_files(root, [local.name])
    rels = list(stats)
    for rel in rels:
        refuse_too_large(rel, stats[rel].st_size)
    upload = Put(api, volume, root, base)
    small = [hash_file(root, rel, stats[rel], upload.hashes) for rel in rels
             if stats[rel].st_size < SMALL_FILE]
    large = [rel for rel in rels if stats[rel].st_size >= SMALL_FILE]
    # The small files' plan goes first, alone: it creates the volume, which
    # the large files' plans, side by side, then find.
    small = upload.plan(small)
    upload.progress = Progress("put", sum(f.size for f in small)
                               + sum(stats[rel].st_size for rel in large))
    with ThreadPoolExecutor(PARALLEL) as pool, ThreadPoolExecutor(BUNDLES_AT_ONCE) as bundler:
        jobs = [bundler.submit(upload.send_bundle, files) for files in
                _batches(small, lambda f: f.size, BUNDLE_BYTES, BUNDLE_FILES)]
        # Large files a group at a time, each hashed, planned and sent in one
        # thread: the first bytes go out while later files are still hashed.
        jobs += [pool.submit(upload.send_large, group, stats) for group in
                 _batches(large, lambda rel: stats[rel].st_size, GROUP_BYTES, GROUP_FILES)]
        try:
            for job in jobs:
                job.result()
        finally:
            upload.progress.close()
            upload.hashes.save()
    target = f"{volume}/{base}" if base else f"{volume}/{local.name}"
    skipped = len(rels) - upload.files
    click.echo(f"{count(upload.files, 'file')}, {format_bytes(upload.bytes)} → {shown(target)}"
               + (f" ({skipped} already there)" if skipped else ""), err=True)


class Put:
    """One `div storage put`: what it asks the server and sends, and what it
    has sent (files, bytes), from several threads."""

    def __init__(self, api: ApiClient, volume: str, root: Path, base: str):
        self.api, self.volume, self.root, self.base = api, volume, root, base
        self.progress: Progress     # set by put() once the total is known, before any send
        self.files = self.bytes = 0
        self._lock = threading.Lock()
        # Files unchanged since an earlier put or run are not read again.
        self.hashes = HashCache(root)

    def remote(self, file: LocalFile) -> str:
        return f"{self.base}/{file.path}" if self.base else file.path

    def plan(self, files: list[LocalFile]) -> list[LocalFile]:
        """The files the volume lacks (at least one request: it creates the volume)."""
        to_send: set[str] = set()
        for start in range(0, max(len(files), 1), PLAN_BATCH):
            batch = files[start:start + PLAN_BATCH]
            to_send.update(self.api.post(f"/volumes/{self.volume}/plan", {"files": [
                {"path": self.remote(f), "size": f.size, "sha256": f.sha256} for f in batch]})["send"])
        return [f for f in files if self.remote(f) in to_send]

    def send_large(self, group: list[str], stats: dict[str, os.stat_result]) -> None:
        files = [hash_file(self.root, rel, stats[rel], self.hashes) for rel in group]
        sending = self.plan(files)
        self.progress.drop(sum(f.size for f in files) - sum(f.size for f in sending))
        for file in sending:
            self.api.put_file(f"/volumes/{self.volume}/files", file.disk_path, file.size,
                              params={"path": self.remote(file)},
                              headers={"X-Div-Sha256": file.sha256})
            self._sent([file])

    def send_bundle(self, files: list[LocalFile]) -> None:
        buffer = io.BytesIO()
        # Every hash in one header at the start, not a header of its own a file.
        hashes = json.dumps({self.remote(file): file.sha256 for file in files})
        with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT,
                          pax_headers={"DIV.sha256s": hashes}) as bundle:
            for file in files:
                info = tarfile.TarInfo(self.remote(file))
                info.size = file.size
                with open(file.disk_path, "rb") as f:
                    bundle.addfile(info, f)
        self.api.post_bytes(f"/volumes/{self.volume}/bundle", buffer.getvalue(), "application/x-tar")
        self._sent(files)

    def _sent(self, files: list[LocalFile]) -> None:
        size = sum(f.size for f in files)
        with self._lock:
            self.files += len(files)
            self.bytes += size
        self.progress.add(size)


@storage.command("ls")
@click.argument("volume", required=False, callback=_volume, shell_complete=volume_names)
@click.argument("path", required=False, default="")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_api
def ls(api: ApiClient, volume: str | None, path: str, as_json: bool) -> None:
    """List the org's volumes (size, files), or what is at PATH in VOLUME."""
    if volume is None:
        answer = api.get("/volumes")
        volumes = answer["volumes"]
        if as_json:
            return print_json(volumes)
        # Data first; the volumes that hold `div run`'s code uploads after.
        table(["VOLUME", "SIZE", "FILES", "HOLDS"],
              [[v["name"], format_bytes(v["size"]), str(v["files"]),
                "code (div run)" if v.get("code") else "data"]
               for v in sorted(volumes, key=lambda v: bool(v.get("code")))])
        return _storage_line(answer.get("storage"))
    answer = api.get(f"/volumes/{volume}/ls", {"path": path})
    if as_json:
        return print_json(answer["entries"])
    table(["SIZE", "MODIFIED", "NAME"],
          [["-" if e["type"] == "dir" else format_bytes(e["size"]), _modified(e["mtime"]),
            e["path"].rsplit("/", 1)[-1] + ("/" if e["type"] == "dir" else "")]
           for e in answer["entries"]])


def _storage_line(storage: dict[str, Any] | None) -> None:
    """The org's storage against its quota, on stderr: stdout stays the table."""
    if not storage:
        return
    used, quota = format_bytes(storage["used_bytes"]), storage["quota_bytes"]
    of = f" of {format_bytes(quota)} quota" if quota is not None else " (no quota)"
    click.echo(f"storage: {used}{of}, volumes, code and blobs together", err=True)


def _modified(mtime: float) -> str:
    try:
        return started(datetime.fromtimestamp(mtime, UTC).isoformat())
    except (ValueError, OverflowError, OSError):    # a time a run set past any calendar
        return str(mtime)


def _fetch(api: ApiClient, volume: str, entry: dict[str, Any], local: Path,
           progress: Progress) -> bool:
    """Downloads one file unless it is already complete; resumes a partial
    one (local.div-part). Returns whether bytes were fetched. The bytes are
    hashed as they are written, so the check costs no second read."""
    if local.is_file() and local.stat().st_size == entry["size"] \
            and int(local.stat().st_mtime) == int(entry["mtime"]):
        return False
    local.parent.mkdir(parents=True, exist_ok=True)
    part = _part_of(local)
    offset = part.stat().st_size if part.exists() else 0
    if offset >= entry["size"]:
        offset = 0   # complete but never checked, or longer: fetched again
    with HashingWriter(part, resume=bool(offset)) as out:
        sha, length = api.download(f"/volumes/{volume}/files", {"path": entry["path"]}, out,
                                   offset, progress.add)
    _check_whole(part, entry["path"], sha, length, out.hexdigest())
    os.replace(part, local)
    os.utime(local, (entry["mtime"], entry["mtime"]))
    return True


def _part_of(local: Path) -> Path:
    """Where a download is written until it is whole: NAME.div-part beside
    it, or for a name too long for that (a filesystem's 255 bytes), a
    hidden name made from its hash."""
    name = os.fsencode(local.name)
    if len(name) + len(".div-part") <= 255:
        return local.with_name(local.name + ".div-part")
    return local.with_name(f".{hashlib.sha256(name).hexdigest()[:24]}.div-part")


class HashingWriter:
    """A file written (or appended to, after hashing what it holds) whose
    sha256 is kept as it is written."""

    def __init__(self, path: Path, resume: bool):
        self._file = open(path, "ab" if resume else "wb")     # closed by __exit__
        self._digest = hashlib.sha256()
        if resume:
            with open(path, "rb") as held:
                while chunk := held.read(1 << 20):
                    self._digest.update(chunk)

    def write(self, data: bytes | memoryview) -> None:
        self._digest.update(data)
        self._file.write(data)

    def seek(self, offset: int) -> None:
        """Only back to the start, to be written again whole."""
        assert offset == 0
        self._file.seek(0)
        self._digest = hashlib.sha256()

    def truncate(self) -> None:
        self._file.truncate()

    def hexdigest(self) -> str:
        return self._digest.hexdigest()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self._file.close()


def _check_whole(part: Path, path: str, sha: str, length: int, written: str) -> None:
    """A download is renamed into place only when it is the whole file: its
    length and sha256 what the server said. A short one stays to resume."""
    size = part.stat().st_size
    if size != length:
        raise click.ClickException(f"{shown(path)}: the download stopped after {size} of {length} "
                                   "bytes; run the same get again to resume")
    if sha and written != sha:
        part.unlink()
        raise click.ClickException(f"{shown(path)}: what arrived does not match the file's sha256 "
                                   "(did it change meanwhile?); nothing was kept, get it again")


@storage.command("get")
@click.argument("volume", callback=_volume, shell_complete=volume_names)
@click.argument("path", default="")
@click.argument("dest", required=False)
@pass_api
def get(api: ApiClient, volume: str, path: str, dest: str | None) -> None:
    """Download PATH from VOLUME: a folder into a local folder of the same
    name (or DEST), a file likewise (into DEST when DEST is a folder or ends
    in /). Files already complete are skipped and an interrupted download
    resumes where it stopped. No size limit."""
    answer = api.get(f"/volumes/{volume}/ls", {"path": path, "recursive": "1"})
    top = answer["entry"]
    name = top["path"].rsplit("/", 1)[-1] or volume
    if top["type"] == "file":
        if dest is not None and (dest.endswith("/") or Path(dest).is_dir()):    # into a folder
            target = Path(dest) / name
        else:
            target = Path(dest or name)
        jobs = [(answer["entries"][0], target)]
    else:
        target = Path(dest or name)
        prefix = top["path"] + "/" if top["path"] else ""
        jobs = [(e, target / e["path"][len(prefix):]) for e in answer["entries"]]
    progress = Progress("get", sum(e["size"] for e, _ in jobs))
    failed: list[str] = []

    def fetch(job: tuple[dict[str, Any], Path]) -> bool:
        """One file; one that cannot be written here (a name this filesystem
        refuses, a full disk) is said and the others go on."""
        try:
            return _fetch(api, volume, job[0], job[1], progress)
        except OSError as exc:
            failed.append(f"{shown(job[0]['path'])}: not written to {shown(job[1])}: "
                          f"{exc.strerror}")
            return False
    with ThreadPoolExecutor(PARALLEL) as pool:
        try:
            fetched = list(pool.map(fetch, jobs))
        finally:
            progress.close()
    total = sum(e["size"] for (e, _), got in zip(jobs, fetched, strict=True) if got)
    skipped = fetched.count(False)
    click.echo(f"{count(fetched.count(True), 'file')}, {format_bytes(total)} → {shown(target)}"
               + (f" ({skipped - len(failed)} already complete)" if skipped > len(failed) else ""),
               err=True)
    if failed:
        for line in failed:
            click.echo(line, err=True)
        raise click.ClickException(f"{count(len(failed), 'file')} not written")


@storage.command("rm")
@click.argument("volume", callback=_volume, shell_complete=volume_names)
@click.argument("path", required=False)
@click.option("--yes", is_flag=True, help="Delete a folder or a whole volume without asking.")
@pass_api
def rm(api: ApiClient, volume: str, path: str | None, yes: bool) -> None:
    """Delete PATH (a file or a folder) from VOLUME, or with no PATH the whole
    volume. A folder or a volume asks first, unless --yes."""
    if path:
        if not yes and _is_folder(api, volume, path):
            _confirm(f"the folder {volume}/{shown(path)}")
        api.delete(f"/volumes/{volume}/files", {"path": path})
        click.echo(f"deleted {volume}/{shown(path)}", err=True)
        return
    if not yes:
        _confirm(f"the whole volume {volume}")
    api.delete(f"/volumes/{volume}")
    click.echo(f"deleted the volume {volume}", err=True)


def _is_folder(api: ApiClient, volume: str, path: str) -> bool:
    """Whether PATH is a folder; what is not there (or not allowed) is left
    for the delete to say."""
    try:
        kind: str = api.get(f"/volumes/{volume}/ls", {"path": path})["entry"]["type"]
        return kind != "file"
    except ApiError as exc:
        if exc.status in (400, 404):
            return False
        raise


def _confirm(what: str) -> None:
    if not sys.stdin.isatty():
        raise click.UsageError(f"deleting {what} needs --yes (no terminal to ask on)")
    click.confirm(f"Delete {what} and everything in it?", abort=True)
