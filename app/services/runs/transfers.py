"""S3 transfers: `div storage import` and `export` as runs of their own.

A transfer is a cpu run (billed as one, listed by `div ls`, its progress in
its log, stopped by `div stop`) whose code is the transfer program
(s3/transfer.py) and whose command moves one prefix to or from one volume.
The bytes move on a node, never through the web workers; the org's S3
secrets (AWS_*) reach that run's sandbox alone, as any run's secrets do,
and are masked in its log. The endpoint is the org's to choose, so it is
only ever called from inside a sandbox, never from the server.

A run may also name buckets to mount (`div run --mount s3://B/P:/mnt/NAME`):
each is an import into the volume NAME, and the run's job waits for those
jobs (Slurm's afterok), so only what changed since the last copy moves and
the run starts with its data in place."""
from __future__ import annotations

import functools
import hashlib
import os
import shlex
import shutil
import tempfile
from dataclasses import dataclass
from importlib import resources

from flask import current_app

from divergent.app.models import Org
from divergent.app.services.accounts.secrets import secrets_of
from divergent.app.services.durable import sync_folder
from divergent.app.services.errors import Invalid
from divergent.app.services.files.storage import clean_path, open_volume
from divergent.app.services.files.volumes import check_volume_name, data_path
from divergent.terms import CPU, S3_BUCKET

# The names every S3 tool reads; the first two are required.
REQUIRED_SECRETS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
OPTIONAL_SECRETS = ("AWS_ENDPOINT_URL", "AWS_DEFAULT_REGION", "AWS_SESSION_TOKEN")
DIRECTIONS = ("import", "export")
PROJECT = "s3"
# Two cpu units: two cores for the transfer program's threads (the bytes
# wait on the network and the share, not the cores) and 4 GiB.
UNITS = 2
PROGRAM = "div_s3.py"
MAX_KEY_BYTES = 1024


@dataclass(frozen=True)
class S3Location:
    bucket: str
    prefix: str

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"


def parse_s3_url(url: object) -> S3Location:
    """s3://BUCKET/PREFIX, the prefix without the slashes around it."""
    if not isinstance(url, str) or not url.startswith("s3://"):
        raise Invalid(f"{url!r} is not an S3 location: s3://BUCKET/PREFIX")
    bucket, _, prefix = url[len("s3://"):].partition("/")
    if not S3_BUCKET.fullmatch(bucket):
        raise Invalid(f"invalid bucket name {bucket!r}: 3 to 63 letters, digits, ., - and _")
    prefix = prefix.strip("/")
    if any(not c.isprintable() for c in prefix) or len(prefix.encode()) > MAX_KEY_BYTES:
        raise Invalid(f"invalid prefix in {url!r}: at most {MAX_KEY_BYTES} bytes, "
                      "no control characters")
    return S3Location(bucket, prefix)


def s3_secret_names(org: Org) -> list[str]:
    """The org's S3 secrets a transfer gets: refused, saying how to set
    them, while a required one is missing."""
    have = {secret.name for secret in secrets_of(org)}
    missing = [name for name in REQUIRED_SECRETS if name not in have]
    if missing:
        which = "secret " + missing[0] if len(missing) == 1 else "secrets " + " and ".join(missing)
        raise Invalid(f"the org has no {which}: set the bucket's keys first (div secrets set "
                      f"{missing[0]}; AWS_ENDPOINT_URL too, for a store other than AWS)")
    return [name for name in REQUIRED_SECRETS + OPTIONAL_SECRETS if name in have]


@dataclass(frozen=True)
class Transfer:
    direction: str
    volume: str
    path: str
    location: S3Location

    def command(self) -> str:
        """Quoted word by word: the values reach only the run's own shell,
        inside its sandbox, and even there each is one argument."""
        root = f"/mnt/{self.volume}"
        if self.direction == "import":
            words = ["import", self.location.url, root, self.path]
        else:
            words = ["export", root, self.path, self.location.url]
        return shlex.join(["python3", "-I", PROGRAM, *words])


def parse_transfer(body: object) -> Transfer:
    if not isinstance(body, dict):
        raise Invalid("send the transfer as a JSON object")
    direction = body.get("direction")
    if direction not in DIRECTIONS:
        raise Invalid("direction is import or export")
    if not isinstance(body.get("max_spend"), str | None):
        raise Invalid("max_spend must be a string of dollars")
    path = clean_path(body.get("path") or "")
    if any(not c.isprintable() for c in path):
        raise Invalid("a path in a volume may not hold control characters")
    if path.split("/")[0] == ".div-partial":
        raise Invalid(".div-partial is where transfers keep partial files")
    return Transfer(direction, check_volume_name(body.get("volume")), path,
                    parse_s3_url(body.get("url")))


def parse_mount(text: object) -> tuple[S3Location, str]:
    """s3://BUCKET/PREFIX:/mnt/NAME as the location and the volume NAME."""
    if not isinstance(text, str) or ":/mnt/" not in text:
        raise Invalid(f"a mount is s3://BUCKET/PREFIX:/mnt/NAME, not {text!r}")
    url, _, volume = text.rpartition(":/mnt/")
    return parse_s3_url(url), check_volume_name(volume.rstrip("/"))


def run_fields(org: Org, transfer: Transfer, types: dict) -> dict:
    """What makes a transfer a run (runs.RunRequest's fields): the program
    as its code, the org's S3 secrets, two cpu units, the volume it names."""
    if CPU not in types:
        raise Invalid("this site sells no cpu runs, which S3 transfers run as")
    if transfer.direction == "export":
        open_volume(org, transfer.volume).close()   # NotFound when there is none
    fields = dict(project=PROJECT, command=transfer.command(), gpu=CPU, gpus=UNITS,
                  secrets=s3_secret_names(org), tool_dir=program_dir(), volumes=[transfer.volume])
    image = current_app.config["DIV_TRANSFER_IMAGE"]
    return fields | ({"image": image} if image else {})


@functools.cache
def _program() -> tuple[bytes, str]:
    """The transfer program's text and the name of its folder (its hash):
    read once a process."""
    text = resources.files("divergent.s3").joinpath("transfer.py").read_bytes()
    return text, f"s3-{hashlib.sha256(text).hexdigest()[:16]}"


def program_dir() -> str:
    """The transfer program, as the code of a transfer run: a folder only
    the server writes, named by the program's hash, made once, on disk
    before its name is (a crash never leaves a named folder with a torn
    program that every later transfer would run)."""
    text, name = _program()
    tools = data_path("tools")
    folder = os.path.join(tools, name)
    if os.path.isdir(folder):
        return folder
    os.makedirs(tools, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".s3-", dir=tools)
    with open(os.path.join(staging, PROGRAM), "wb") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.chmod(staging, 0o755)
    try:
        os.rename(staging, folder)
    except OSError:        # made meanwhile by another worker
        shutil.rmtree(staging)
        return folder
    tools_fd = os.open(tools, os.O_RDONLY | os.O_DIRECTORY)
    try:
        sync_folder(tools_fd)
    finally:
        os.close(tools_fd)
    return folder
