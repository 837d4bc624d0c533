"""Volumes: folders on the share at <data>/share/<org>/<volume>, one row each.
Issue 4 adds put/ls/get; here, what runs need: the org's folder, a volume
made on demand, and the volumes a command names as /mnt/<volume>."""
from __future__ import annotations

import contextlib
import os
import re
import stat
import time
from typing import BinaryIO

from flask import current_app

from divergent.app.extensions import db
from divergent.app.models import Org, Volume
from divergent.app.services.errors import Conflict, Invalid
from divergent.app.services.rows import add_unique
from divergent.terms import VOLUME_NAME

# A volume named in a command: /mnt/<name> followed by / or the name's end.
MNT_REFERENCE = re.compile(r"(?<![\w/.-])/mnt/(" + VOLUME_NAME.pattern.strip("^$") + r")(?![A-Za-z0-9._-])")


def data_path(*parts: str) -> str:
    return os.path.join(current_app.config["DIV_DATA_DIR"], *parts)


def org_dir(org: Org) -> str:
    return data_path("share", org.name)


def run_dir(org: Org, name: str) -> str:
    """A run's state folder: its batch script, log, metrics, exit codes."""
    return data_path("runs", org.name, name)


def make_state_dir(path: str) -> str:
    """A run's (or sweep's) state folder, new: where an org's jobs may
    write, a link or a folder of theirs in its place is refused, never
    followed (the org's folder is sticky: one the server made stays)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        os.mkdir(path)
    except FileExistsError:
        found = os.lstat(path)
        if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.geteuid():
            raise Conflict(f"something a run left is where {os.path.basename(path)}'s state "
                           "folder goes: an admin removes it") from None
    return path


def write_state_file(folder: str, name: str, text: str) -> None:
    """A new file the server writes in a state folder (the batch script):
    one a run put there first is replaced, and never written through."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=fd)
        out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666,
                      dir_fd=fd)
        with os.fdopen(out, "w") as f:
            f.write(text)
    finally:
        os.close(fd)


def open_state_fd(path: str) -> int | None:
    """A file a run wrote in its state folder (its log, its metrics), to
    read; None when it is not there or is not a plain file: a link a run
    put in its place is never followed to the server's or another org's
    files, and a FIFO never waited on."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return fd


def open_state_file(path: str) -> BinaryIO | None:
    """open_state_fd's file, as a file object."""
    fd = open_state_fd(path)
    return None if fd is None else os.fdopen(fd, "rb")


# How long after its first node's exit file a run counts as ending: the
# reconciler and log followers look at it sooner until Slurm says it ended
# (or this long has passed, for a job stuck ending).
ENDING_SECONDS = 10


def run_is_ending(state_dir: str, attempt: int) -> bool:
    """Whether the run's command has ended on its first node in this
    attempt (slurm/script.py writes exit.<attempt>.<node> as it does),
    these last ENDING_SECONDS: Slurm ends the job a moment later."""
    try:
        written = os.stat(os.path.join(state_dir, f"exit.{attempt}.0"),
                          follow_symlinks=False).st_mtime
    except OSError:
        return False
    return time.time() - written < ENDING_SECONDS


def trees_dir(org: Org) -> str:
    """The org's stored code trees, <volume>/<name> each: written only by the
    server and never seen writable by a run (they are bound read-only at
    /mnt/<volume>/code), so no run can change the code another one gets."""
    return data_path("trees", org.name)


def check_volume_name(name: object) -> str:
    if not isinstance(name, str) or not VOLUME_NAME.fullmatch(name):
        raise Invalid(f"invalid volume name {name!r}: use lowercase letters, digits, "
                      "-, _ and ., 1 to 63 characters, not starting with .")
    return name


def volume_dir(org: Org, name: str) -> str:
    return os.path.join(org_dir(org), check_volume_name(name))


def ensure_volume(org: Org, name: str) -> str:
    """The volume's folder, made (row and folder) if it does not exist."""
    path = volume_dir(org, name)
    os.makedirs(path, exist_ok=True)
    exists = db.session.execute(
        db.select(Volume.id).filter_by(org_id=org.id, name=name)).scalar_one_or_none()
    if exists is None:
        add_unique(Volume(org_id=org.id, name=name))   # or made at this moment by another request
    return path


def volumes_in_command(command: str) -> list[str]:
    """Volumes the command names as /mnt/<volume>, in order, once each."""
    return list(dict.fromkeys(MNT_REFERENCE.findall(command)))
