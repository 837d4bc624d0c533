"""The S3 transfer program: `div storage import` and `export` run it inside a
transfer run's sandbox, on a node, where the org's volume is at /mnt/<volume>
(app/services/runs/transfers.py). Standalone on purpose: the node's Python, the
standard library and boto3 (Debian's python3-boto3 1.26 or newer), never
the server's code.

    python3 div_s3.py import s3://BUCKET/PREFIX VOLUME_ROOT [PATH]
    python3 div_s3.py export VOLUME_ROOT PATH s3://BUCKET/PREFIX

The endpoint and keys come from the environment under the names every S3
tool reads (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
AWS_DEFAULT_REGION, AWS_SESSION_TOKEN): the org's secrets, given to this
sandbox alone.

What it promises:
- every path in the volume is opened a component at a time from the
  volume's own descriptor with O_NOFOLLOW: no key or link leads out of it;
- a key that cannot be a path in the volume (`..`, absolute, empty or `.`
  parts, control characters, a name over 255 bytes, a file that is also a
  folder) is refused with a line of its own, and the rest still moves;
- a file appears in the volume whole or not at all: it is written under
  .div-partial/ at the volume's root and renamed into place;
- started again, it moves only what is missing: an imported file records the
  object's ETag and size (an xattr; its mtime where the share has none), an
  exported one is compared by size and its S3 ETag (MD5, or the MD5 of its
  parts' MD5s), kept with the file's size and mtime so a file is hashed once;
- many objects at once, each large one in parallel parts (s3transfer), with
  no limit on size or count: objects are listed and moved a page at a time.

Exit codes: 0 when everything moved, 1 otherwise (each reason a line)."""
from __future__ import annotations

import errno
import fcntl
import hashlib
import itertools
import os
import secrets
import signal
import stat
import sys
import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass
from datetime import datetime

try:
    from s3transfer.subscribers import BaseSubscriber
except ImportError:         # said in one line by s3_client()
    BaseSubscriber = object

# What an imported file is (the object's ETag, its size, the file's mtime
# once written) and what an exported one hashes to (its size, mtime, ETag).
IMPORTED_XATTR, EXPORTED_XATTR = "user.div.s3.imported", "user.div.s3.exported"
PARTIAL = ".div-partial"
PART_BYTES = 8 << 20        # what `aws s3` uses: 8 MiB parts above 8 MiB
CONCURRENCY = 16            # requests at once, parts of one object or many objects
OBJECTS_IN_FLIGHT = 64      # objects handed to the transfer manager at once
PROGRESS_SECONDS = 2.0
QUIET_SECONDS = 30.0
MAX_NAME_BYTES = 255
MAX_PATH_BYTES = 4096
SECRET_NAMES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                "AWS_ENDPOINT_URL")
MAX_DEPTH = 256             # folders below the volume a path may go
OPEN_FOLDERS = 64           # folder descriptors kept open at once
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Refused(Exception):
    """A key or path that cannot move; said in one line, the rest goes on."""


class Fatal(Exception):
    """The whole transfer cannot go on: one line, exit 1."""


class Stopped(BaseException):
    """SIGTERM (div stop, Slurm's cancel): the partial files go, one line,
    exit 143. Not an Exception: it must pass through the handlers that
    make one object's failure a line and go on."""


def say(line: str) -> None:
    """A line of the log. The org's S3 secrets are masked in the log by
    their bytes, which an escaped control character would change: they go
    here, before anything else sees the line."""
    for name in SECRET_NAMES:
        value = os.environ.get(name, "")
        if len(value) >= 4:
            line = line.replace(value, "***").replace(shown(value), "***")
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def shown(text: str) -> str:
    """A key as it may appear in a log line: control characters escaped, so
    that no key can write a line of its own."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError


def duration(seconds: int) -> str:
    """12s, 3m 20s, 1h 2m."""
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h {minutes}m" if hours else f"{minutes}m {secs}s" if minutes else f"{secs}s"


def parse_url(url: str) -> tuple[str, str]:
    """s3://BUCKET/PREFIX as (bucket, prefix); the prefix without its
    leading or trailing slash."""
    if not url.startswith("s3://"):
        raise Fatal(f"{shown(url)}: an S3 location is s3://BUCKET/PREFIX")
    bucket, _, prefix = url[len("s3://"):].partition("/")
    if not bucket:
        raise Fatal(f"{shown(url)}: name a bucket: s3://BUCKET/PREFIX")
    return bucket, prefix.strip("/")


def relative_parts(rel: str) -> list[str]:
    """The parts of a path below the destination, or Refused."""
    if rel.startswith("/"):
        raise Refused("an absolute path (it starts with /)")
    if any(not c.isprintable() for c in rel):
        raise Refused("control characters in the name")
    if len(rel.encode(errors="surrogatepass")) > MAX_PATH_BYTES:
        raise Refused(f"a path over {MAX_PATH_BYTES} bytes")
    parts = rel.split("/")
    if len(parts) > MAX_DEPTH:
        raise Refused(f"more than {MAX_DEPTH} folders deep")
    for part in parts:
        if part == "..":
            raise Refused("'..' would lead out of the folder")
        if part in ("", "."):
            raise Refused("an empty or '.' name (// or /./)")
        if len(part.encode(errors="surrogatepass")) > MAX_NAME_BYTES:
            raise Refused(f"a name over {MAX_NAME_BYTES} bytes")
    return parts


class Volume:
    """The volume's root, opened once; every other folder is opened from it
    one component at a time, never through a link. The descriptors of the
    folders used last are kept (at most OPEN_FOLDERS): a tree of a million
    folders needs no more. Used from the main thread alone."""

    def __init__(self, root: str):
        try:
            self.fd = os.open(root, DIR_FLAGS)
        except OSError as exc:
            raise Fatal(f"{root}: not a volume this run sees ({exc.strerror})") from None
        self._open: OrderedDict[tuple[str, ...], int] = OrderedDict()

    def folder(self, parts: list[str] | tuple[str, ...], create: bool) -> int:
        """The descriptor of the folder at these parts, made on the way when
        `create`; Refused when a part is a file or a link. Valid until the
        next call: use it at once."""
        parts = tuple(parts)
        known = len(parts)
        while known and parts[:known] not in self._open:
            known -= 1
        fd = self._open[parts[:known]] if known else self.fd
        if known:
            self._open.move_to_end(parts[:known])
        for depth in range(known, len(parts)):
            fd = self._keep(parts[:depth + 1], self._child(fd, parts[:depth + 1], create))
        return fd

    @staticmethod
    def _child(parent: int, parts: tuple[str, ...], create: bool) -> int:
        name = parts[-1]
        try:
            if create:
                try:
                    os.mkdir(name, 0o755, dir_fd=parent)
                except FileExistsError:
                    pass
            return os.open(name, DIR_FLAGS, dir_fd=parent)
        except FileNotFoundError:
            raise Refused(f"{'/'.join(parts)} does not exist") from None
        except OSError as exc:
            if exc.errno in (errno.ENOTDIR, errno.ELOOP):
                raise Refused(f"{'/'.join(parts)} is a file or a link in the volume, "
                              "not a folder") from None
            raise

    def _keep(self, parts: tuple[str, ...], fd: int) -> int:
        self._open[parts] = fd
        while len(self._open) > OPEN_FOLDERS:
            os.close(self._open.popitem(last=False)[1])
        return fd

    def lstat(self, parts: list[str]) -> os.stat_result | None:
        try:
            return os.stat(parts[-1], dir_fd=self.folder(parts[:-1], False),
                           follow_symlinks=False)
        except (FileNotFoundError, Refused):
            return None


def xattr(fd: int, name: str) -> str | None:
    try:
        return os.getxattr(fd, name).decode()
    except OSError:
        return None


def set_xattr(fd: int, name: str, value: str) -> bool:
    try:
        os.setxattr(fd, name, value.encode())
        return True
    except OSError:     # a share without user xattrs: the mtime says it instead
        return False


def s3_client():
    try:
        import boto3
        from botocore.config import Config
    except ImportError:
        raise Fatal("boto3 is not installed for this Python: the site's admin installs it "
                    "on the nodes (Debian: apt install python3-boto3), or, where runs are "
                    "containers, names an image that has it (DIV_TRANSFER_IMAGE)") from None
    endpoint = os.environ.get("AWS_ENDPOINT_URL") or None
    # A store that does not answer is one line within about a minute, not
    # botocore's default of several minutes of retries.
    options = dict(signature_version="s3v4", retries={"max_attempts": 5, "mode": "standard"},
                   connect_timeout=10, read_timeout=60, max_pool_connections=CONCURRENCY + 4,
                   s3={"addressing_style": "path" if endpoint else "auto"})
    try:   # botocore 1.36 and later: checksums only where S3 requires them
        config = Config(request_checksum_calculation="when_required",
                        response_checksum_validation="when_required", **options)
    except TypeError:
        config = Config(**options)
    return boto3.client("s3", endpoint_url=endpoint, config=config,
                        region_name=os.environ.get("AWS_DEFAULT_REGION") or "us-east-1")


def transfer_manager(client):
    from s3transfer.manager import TransferConfig, TransferManager
    return TransferManager(client, TransferConfig(
        multipart_threshold=PART_BYTES, multipart_chunksize=PART_BYTES,
        max_request_concurrency=CONCURRENCY, max_io_queue_size=1000))


def unreachable(exc: Exception) -> bool:
    """The connection failed or broke, as opposed to S3 refusing a request."""
    try:
        from botocore.exceptions import ConnectionError, HTTPClientError
    except ImportError:
        return False
    return isinstance(exc, ConnectionError | HTTPClientError)


def failure_line(exc: Exception, bucket: str) -> str:
    """An S3 or network error in one line that says what to do."""
    from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        code = error.get("Code", "")
        if code in ("NoSuchBucket",):
            return f"s3://{bucket}: no such bucket"
        if code in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "403",
                    "InvalidToken", "ExpiredToken"):
            return (f"s3://{bucket}: the S3 service refused the org's credentials ({code}): "
                    "check the secrets AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
        return f"s3://{bucket}: {code or 'error'}: {shown(error.get('Message', str(exc)))}"
    if isinstance(exc, EndpointConnectionError):
        return "cannot reach the S3 service: check the org's secret AWS_ENDPOINT_URL"
    if isinstance(exc, BotoCoreError):
        return f"s3://{bucket}: {shown(str(exc))}"
    return f"{type(exc).__name__}: {shown(str(exc))}"


class Progress:
    """A line on stderr every few seconds: objects and bytes done of those
    known so far (the listing goes on while objects move), the rate."""

    def __init__(self, what: str):
        self.what, self.started = what, time.monotonic()
        self.objects = self.objects_done = self.skipped = 0
        self.bytes = self.bytes_done = 0
        self.listed = False
        self._lock, self._stop = threading.Lock(), threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def add(self, n: int) -> None:
        with self._lock:
            self.bytes_done += n

    def _loop(self) -> None:
        """A line when bytes moved since the last, or every QUIET_SECONDS
        while only the listing goes on."""
        said, quiet = 0, 0.0
        while not self._stop.wait(PROGRESS_SECONDS):
            quiet += PROGRESS_SECONDS
            if self.bytes_done != said or quiet >= QUIET_SECONDS:
                said, quiet = self.bytes_done, 0.0
                say(self.line())

    def line(self) -> str:
        seconds = max(time.monotonic() - self.started, 1e-6)
        rate = self.bytes_done / seconds
        of = "" if self.listed else "+"
        text = (f"{self.what}: {self.objects_done:,} of {self.objects:,}{of} files, "
                f"{human_bytes(self.bytes_done)} of {human_bytes(self.bytes)}{of}, "
                f"{human_bytes(rate)}/s")
        if self.listed and rate > 0 and self.bytes > self.bytes_done:
            text += f", {duration(int((self.bytes - self.bytes_done) / rate) + 1)} left"
        if self.skipped:
            text += f" ({self.skipped:,} unchanged)"
        return text

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


class Sized(BaseSubscriber):
    """Gives s3transfer the size the listing said, which saves a HEAD
    request an object."""

    def __init__(self, size: int):
        self.size = size

    def on_queued(self, future, **kwargs):
        future.meta.provide_transfer_size(self.size)


class Counted(BaseSubscriber):
    def __init__(self, progress: Progress):
        self.progress = progress

    def on_progress(self, future, bytes_transferred, **kwargs):
        self.progress.add(bytes_transferred)


@dataclass(frozen=True)
class PartialFile:
    name: str
    fd: int
    folder: int     # the .div-partial it is in


class Transfer:
    """What import and export share: the client, the manager, a bounded
    window of objects in flight, the partial files, and the tally."""

    def __init__(self, volume_root: str, bucket: str, what: str):
        self.volume = Volume(volume_root)
        self.bucket = bucket
        self.client = s3_client()
        self.manager = transfer_manager(self.client)
        self.progress = Progress(what)
        self.counter = Counted(self.progress)
        self.in_flight: deque = deque()
        self.partial: int | None = None
        self.partial_folders: list[int] = []
        self.partials: set[PartialFile] = set()
        self.refused = self.failed = self.moved = 0

    def refuse(self, name: str, why: str) -> None:
        self.refused += 1
        say(f"refused {shown(name)}: {why}")

    def skip(self, name: str, st: os.stat_result) -> None:
        """A link or a special file in the volume: said, never followed or
        read, and no failure (a venv's links are no reason to fail)."""
        say(f"skipped {shown(name)}: {_not_regular(st)}")

    def fail(self, name: str, error: Exception, temp: PartialFile | None = None) -> None:
        """One object's failure is a line and the rest goes on; a service
        that stopped answering (after botocore's retries) ends the whole
        transfer in one line, not one a remaining object."""
        self.failed += 1
        if temp is not None:
            self._forget(temp, unlink=True)
        if unreachable(error):
            moved = f"{self.moved:,} file" + ("" if self.moved == 1 else "s")
            raise Fatal(f"s3://{self.bucket}: the S3 service stopped answering; {moved} moved, "
                        "started again the transfer moves the rest")
        why = str(error) if isinstance(error, Refused) else failure_line(error, self.bucket)
        say(f"failed {shown(name)}: {why}")

    def done(self, temp: PartialFile | None = None) -> None:
        self.progress.objects_done += 1
        self.moved += 1
        if temp is not None:
            self._forget(temp, unlink=False)

    def open_partial(self) -> int:
        """.div-partial at the volume's root, made if need be (a link or a
        file there is Refused). Opened anew when another transfer removed it
        while empty; the folder opened before stays open for the files in it."""
        try:
            os.mkdir(PARTIAL, 0o755, dir_fd=self.volume.fd)
        except FileExistsError:
            pass
        self.partial = Volume._child(self.volume.fd, (PARTIAL,), create=False)
        self.partial_folders.append(self.partial)
        return self.partial

    def partial_file(self) -> PartialFile:
        """A new file in .div-partial/, named for the job that writes it."""
        name = f"{os.environ.get('SLURM_JOB_ID', os.getpid())}-{secrets.token_hex(6)}"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            folder = self.partial if self.partial is not None else self.open_partial()
            fd = os.open(name, flags, 0o644, dir_fd=folder)
        except FileNotFoundError:           # removed by a transfer that ended
            folder = self.open_partial()
            fd = os.open(name, flags, 0o644, dir_fd=folder)
        fcntl.flock(fd, fcntl.LOCK_EX)      # while this process lives (_sweep_partials)
        temp = PartialFile(name, fd, folder)
        self.partials.add(temp)
        return temp

    def _forget(self, temp: PartialFile, unlink: bool) -> None:
        self.partials.discard(temp)
        if unlink:
            try:
                os.unlink(temp.name, dir_fd=temp.folder)
            except FileNotFoundError:
                pass

    def submit(self, future, finish) -> None:
        """Hands an object to the manager; waits for the oldest while the
        window is full, so a million objects never sit in memory at once."""
        self.in_flight.append((future, finish))
        while len(self.in_flight) >= OBJECTS_IN_FLIGHT:
            self._settle_oldest()

    def drain(self) -> None:
        while self.in_flight:
            self._settle_oldest()

    def _settle_oldest(self) -> None:
        """Waits for the oldest object, kept in in_flight meanwhile, so a
        stop while it moves cancels it too (close)."""
        self._settle(*self.in_flight[0])
        self.in_flight.popleft()

    @staticmethod
    def _settle(future, finish) -> None:
        try:
            future.result()
        except Exception as exc:  # noqa: BLE001 - one object's failure is a line, not the end
            finish(exc)
            return
        finish(None)

    def close(self, aborted: bool) -> None:
        """Stops the manager; a transfer that ends early (killed, stopped, a
        fatal error) leaves no partial file of its own behind, whatever the
        library does. Its own cancel is not used: s3transfer's
        shutdown(cancel=True) raises TypeError with transfers in flight
        (0.6 to 0.17 pass its message where an exception class goes); each
        future is cancelled through its public cancel() instead."""
        try:
            if aborted:
                for future, _ in self.in_flight:
                    future.cancel()
            self.manager.shutdown()
        except Exception:  # noqa: BLE001 - ending anyway: its failure to stop is not news
            if not aborted:
                raise
        finally:
            for temp in list(self.partials):
                self._forget(temp, unlink=True)
            if self.partial is not None:
                _remove_if_empty(self.volume.fd, PARTIAL)


def _listing(client, bucket: str, prefix: str):
    """Every object below the prefix, a page at a time."""
    pages = client.get_paginator("list_objects_v2").paginate(
        Bucket=bucket, Prefix=prefix + "/" if prefix else "")
    for page in pages:
        for obj in page.get("Contents", []):
            yield _checked(obj)


def _checked(obj: dict) -> dict:
    """An object as S3 describes it, or Fatal when what answered is no S3
    server (an endpoint that says 200 and nothing): never a KeyError."""
    if not (isinstance(obj.get("Key"), str) and isinstance(obj.get("Size"), int)
            and isinstance(obj.get("ETag"), str) and obj.get("LastModified") is not None):
        raise Fatal("the S3 endpoint's answer has no key, size or ETag for an object: "
                    "is the org's secret AWS_ENDPOINT_URL an S3 service?")
    return obj


def _single_object(client, bucket: str, key: str) -> dict | None:
    from botocore.exceptions import ClientError
    try:
        head = client.head_object(Bucket=bucket, Key=key)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
            return None
        raise
    return _checked({"Key": key, "Size": head.get("ContentLength"), "ETag": head.get("ETag"),
                     "LastModified": head.get("LastModified")})


def _mtime(obj: dict) -> float:
    modified = obj["LastModified"]
    return modified.timestamp() if isinstance(modified, datetime) else float(modified)


def run_transfer(direction: str, url: str, volume_root: str, path: str) -> int:
    """import or export between s3://BUCKET/PREFIX and PATH in the volume;
    the exit code."""
    bucket, prefix = parse_url(url)
    parts = relative_parts(path) if path else []
    job = Transfer(volume_root, bucket, f"{direction} {url}")
    move = _import_all if direction == "import" else _export_all
    with job.progress:
        aborted = True
        try:
            move(job, parts, prefix)
            aborted = False
        finally:
            job.close(aborted)
    return _summary(job, f"{direction}ed")


def _import_all(job: Transfer, dest: list[str], prefix: str) -> None:
    if dest[:1] == [PARTIAL]:
        raise Fatal(f"{PARTIAL} is where transfers keep partial files, not a destination")
    # The first page before anything is made: a bucket that is not there
    # or keys that are refused leave no folder behind.
    objects = _with_single(job, prefix, _listing(job.client, job.bucket, prefix))
    first = next(objects, None)
    if first is None:
        raise Fatal(f"s3://{job.bucket}/{prefix}: no objects there")
    _sweep_partials(job.open_partial())
    job.volume.folder(dest, create=True)
    clashes = Clashes()
    for obj in itertools.chain([first], objects):
        key = obj["Key"]
        if key == prefix:
            rel = key.rsplit("/", 1)[-1]
        else:
            rel = key[len(prefix) + 1:] if prefix else key
        if (rel == "" or rel.endswith("/")) and obj["Size"] == 0:
            continue        # a console's folder marker (the prefix's own, too), not a file
        try:
            parts = relative_parts(rel)
            if not dest and parts[0] == PARTIAL:
                raise Refused(f"{PARTIAL} is where transfers keep partial files")
            clashes.check(rel)
        except Refused as why:
            job.refuse(f"s3://{job.bucket}/{key}", str(why))
            continue
        _import_one(job, obj, dest + parts)
    job.progress.listed = True
    job.drain()


def _with_single(job: Transfer, prefix: str, objects):
    """The objects below PREFIX/, or, when there are none, the object named
    PREFIX itself (s3://bucket/weights.bin)."""
    any_below = False
    for obj in objects:
        any_below = True
        yield obj
    if not any_below and prefix:
        single = _single_object(job.client, job.bucket, prefix)
        if single is not None:
            yield single


class Clashes:
    """Keys that are both a file and a folder (`a` and `a/b`), met as S3
    lists keys: in order, where `a` comes before every `a/...` and those
    are all below `a0` ("0" follows "/"). So a file need only be kept until
    the listing passes `a0`: memory for the files whose folders may still
    come, never for every key. (A file or folder already in the volume in
    the way is met when the key is placed.)"""

    def __init__(self) -> None:
        self.files: list[str] = []

    def check(self, rel: str) -> None:
        self.files = [f for f in self.files if rel < f + "0"]
        for file in self.files:
            if rel.startswith(file + "/"):
                raise Refused(f"{file} is both a file and a folder")
        self.files.append(rel)


def _import_one(job: Transfer, obj: dict, parts: list[str]) -> None:
    size, mark, mtime = obj["Size"], f"{obj['ETag']} {obj['Size']}", _mtime(obj)
    name = "/".join(parts)
    try:
        if _already_imported(job.volume.folder(parts[:-1], create=True), parts[-1], size, mark,
                             mtime):
            job.progress.skipped += 1
            return
        temp = job.partial_file()
    except (Refused, OSError) as exc:
        job.refuse(name, getattr(exc, "strerror", None) or str(exc))
        return
    job.progress.objects += 1
    job.progress.bytes += size
    sink = os.fdopen(temp.fd, "wb")

    def finish(error: Exception | None) -> None:
        try:
            if error is not None:
                raise error
            sink.flush()
            got = os.fstat(sink.fileno()).st_size
            if got != size:
                raise OSError(errno.EIO, f"got {got:,} of {size:,} bytes")
            written = os.fstat(sink.fileno()).st_mtime_ns
            if not set_xattr(sink.fileno(), IMPORTED_XATTR, f"{mark} {written}"):
                os.utime(sink.fileno(), (mtime, mtime))
            sink.close()
            _place(job, temp, parts)
            job.done(temp)
        except Exception as exc:  # noqa: BLE001 - a line for this object, the rest goes on
            sink.close()
            job.fail(name, exc, temp)

    job.submit(job.manager.download(job.bucket, obj["Key"], sink,
                                    subscribers=[Sized(size), job.counter]), finish)


def _already_imported(folder: int, name: str, size: int, mark: str, mtime: float) -> bool:
    """The file is this object already: its size, and the ETag it was
    imported with (or, on a share without xattrs, the object's mtime)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
                     dir_fd=folder)
    except FileNotFoundError:
        return False
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Refused(f"{name} is a link in the volume") from None
        if exc.errno == errno.EISDIR:
            raise Refused(f"{name} is a folder in the volume, the key a file") from None
        raise
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise Refused(f"{name} is a folder in the volume, the key a file")
        if not stat.S_ISREG(st.st_mode) or st.st_size != size:
            return False
        recorded = xattr(fd, IMPORTED_XATTR)
        if recorded is not None:    # changed since (a run wrote it): its mtime moved
            return recorded == f"{mark} {st.st_mtime_ns}"
        return int(st.st_mtime) == int(mtime)
    finally:
        os.close(fd)


def _place(job: Transfer, temp: PartialFile, parts: list[str]) -> None:
    """Renames the whole file into place; a folder of that name is never
    replaced (rename fails on it), a link of that name is (the link, not
    what it points to)."""
    try:
        os.rename(temp.name, parts[-1], src_dir_fd=temp.folder,
                  dst_dir_fd=job.volume.folder(parts[:-1], create=True))
    except IsADirectoryError:
        raise Refused(f"{parts[-1]} is a folder in the volume, the key a file") from None


def _sweep_partials(partial: int) -> None:
    """Deletes what killed transfers left: a partial file whose writer is
    gone holds no lock (a writer locks its file for as long as it lives).
    A file made these last seconds may not be locked yet: left alone."""
    young = time.time() - 5
    for name in os.listdir(partial):
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
                         dir_fd=partial)
        except OSError:
            continue
        try:
            if os.fstat(fd).st_mtime < young:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                os.unlink(name, dir_fd=partial)
        except OSError:
            pass        # locked: a live transfer's
        finally:
            os.close(fd)


def _remove_if_empty(folder: int, name: str) -> None:
    try:
        os.rmdir(name, dir_fd=folder)
    except OSError:
        pass        # another transfer's partials are in it


def _export_all(job: Transfer, source: list[str], prefix: str) -> None:
    top = job.volume.lstat(source) if source else os.fstat(job.volume.fd)
    if top is None:
        raise Fatal(f"{'/'.join(source)}: no such file or folder in the volume")
    if not (stat.S_ISDIR(top.st_mode) or stat.S_ISREG(top.st_mode)):
        raise Fatal(f"{'/'.join(source)}: {_not_regular(top)}, which export does not follow")
    if stat.S_ISREG(top.st_mode):
        files = iter([(source[:-1], source[-1], source[-1])])
    else:
        files = _walk(job, source)
    # Both in S3's order (_walk's), so the objects already there are met as
    # the files are: neither side is ever held whole in memory.
    remote = _listing(job.client, job.bucket, prefix)
    there = next(remote, None)
    for folder_parts, name, rel in files:
        key = f"{prefix}/{rel}" if prefix else rel
        while there is not None and there["Key"] < key:
            there = next(remote, None)
        same = there if there is not None and there["Key"] == key else None
        _export_one(job, folder_parts, name, key,
                    None if same is None else (same["Size"], same["ETag"].strip('"')))
    job.progress.listed = True
    job.drain()


def _walk(job: Transfer, top: list[str]):
    """Every regular file below the folder, (folder parts, name, path below
    top), in the order S3 lists their keys (a folder sorts as its name and
    a slash), one folder's names in memory a level; folders opened without
    following links; links and devices said and left, .div-partial
    skipped, a name that is not UTF-8 refused."""
    stack = [(list(top), iter(_entries(job, list(top))))]
    while stack:
        parts, entries = stack[-1]
        entry = next(entries, None)
        if entry is None:
            stack.pop()
            continue
        name, st = entry
        path = parts + [name]
        if stat.S_ISDIR(st.st_mode):
            stack.append((path, iter(_entries(job, path))))
        elif stat.S_ISREG(st.st_mode):
            yield parts, name, "/".join(path[len(top):])
        else:
            job.skip("/".join(path), st)


def _entries(job: Transfer, parts: list[str]) -> list[tuple[str, os.stat_result]]:
    try:
        fd = job.volume.folder(parts, create=False)
        names = os.listdir(fd)
    except (Refused, OSError) as exc:
        job.refuse("/".join(parts), getattr(exc, "strerror", None) or str(exc))
        return []
    found = []
    for name in names:
        if not parts and name == PARTIAL:
            continue
        if any(0xDC80 <= ord(c) <= 0xDCFF for c in name):
            job.refuse(shown("/".join(parts + [name])), "the name is not UTF-8, as S3 keys are")
            continue
        try:
            found.append((name, os.stat(name, dir_fd=fd, follow_symlinks=False)))
        except FileNotFoundError:
            continue        # deleted since it was listed
    return sorted(found, key=lambda e: e[0] + "/" if stat.S_ISDIR(e[1].st_mode) else e[0])


def _not_regular(st: os.stat_result) -> str:
    return "a link" if stat.S_ISLNK(st.st_mode) else "not a regular file (a FIFO, socket or device)"


def _export_one(job: Transfer, parts: list[str], name: str, key: str,
                remote: tuple[int, str] | None) -> None:
    shown_name = "/".join(parts + [name])
    try:
        # Non-blocking: what was a file when listed may be a FIFO now.
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
                     dir_fd=job.volume.folder(parts, create=False))
    except FileNotFoundError:
        return              # deleted since it was listed
    except (OSError, Refused) as exc:
        job.refuse(shown_name, getattr(exc, "strerror", None) or str(exc))
        return
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        job.skip(shown_name, st)
        return
    source = os.fdopen(fd, "rb")
    if remote is not None and remote[0] == st.st_size and remote[1] == _local_etag(fd, st):
        source.close()
        job.progress.skipped += 1
        return
    job.progress.objects += 1
    job.progress.bytes += st.st_size

    def finish(error: Exception | None) -> None:
        source.close()
        if error is None:
            job.done()
        else:
            job.fail(shown_name, error)

    job.submit(job.manager.upload(source, job.bucket, key, subscribers=[job.counter]), finish)


def _local_etag(fd: int, st: os.stat_result) -> str:
    """The ETag S3 gives this file as s3transfer uploads it: the MD5 below
    the multipart threshold, else the MD5 of its parts' MD5s and their
    count. Kept in an xattr with the file's size and mtime."""
    stamp = f"{st.st_size} {st.st_mtime_ns} "
    recorded = xattr(fd, EXPORTED_XATTR)
    if recorded and recorded.startswith(stamp):
        return recorded[len(stamp):]
    from s3transfer.utils import ChunksizeAdjuster
    chunk = ChunksizeAdjuster().adjust_chunksize(PART_BYTES, st.st_size)
    digests, whole = [], hashlib.md5()
    offset = 0
    while True:
        block = os.pread(fd, chunk, offset)
        if not block:
            break
        offset += len(block)
        digests.append(hashlib.md5(block).digest())
        whole.update(block)
    if st.st_size < PART_BYTES:
        etag = whole.hexdigest()
    else:
        etag = f"{hashlib.md5(b''.join(digests)).hexdigest()}-{len(digests)}"
    set_xattr(fd, EXPORTED_XATTR, stamp + etag)
    return etag


def _summary(job: Transfer, verb: str) -> int:
    p = job.progress
    seconds = time.monotonic() - p.started
    files = f"{job.moved:,} file" + ("" if job.moved == 1 else "s")
    line = (f"{verb} {files} ({human_bytes(p.bytes_done)}) in {seconds:.1f}s; "
            f"{p.skipped:,} unchanged")
    if job.refused or job.failed:
        line += f"; {job.refused:,} refused, {job.failed:,} failed"
    say(line)
    return 1 if job.refused or job.failed else 0


def _stop(*_) -> None:
    raise Stopped


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGTERM, _stop)
    try:
        if len(argv) in (3, 4) and argv[0] == "import":
            return run_transfer("import", argv[1], argv[2], argv[3] if len(argv) == 4 else "")
        if len(argv) == 4 and argv[0] == "export":
            return run_transfer("export", argv[3], argv[1], argv[2])
        say(__doc__.split("\n\n")[1])
        return 2
    except Stopped:
        say("stopped: what had moved stays, whole; no partial file is left")
        return 143
    except Fatal as exc:
        say(str(exc))
        return 1
    except Refused as exc:
        say(f"refused: {exc}")
        return 1
    except Exception as exc:  # noqa: BLE001 - S3's and the network's errors, as one line
        bucket = next((a[5:].split("/")[0] for a in argv if a.startswith("s3://")), "?")
        say(failure_line(exc, bucket))
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
