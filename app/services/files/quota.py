"""Each org's storage quota: its volumes, code trees and blobs together, as
the disk holds them (allocated blocks, at least one a file or folder: a
sparse file counts what it takes, a million empty files 4 GB, a file under
several names once). Measured in the background by the
reconciler (measure_next), and raised by what the server itself writes
between measurements (charge), so every write the server makes for an org
is refused once the org is over its quota, and so is a new run or copy.
What a run writes to a volume is measured after the fact: a site that must
stop a run's writes at the quota too sets the share's own quotas."""
from __future__ import annotations

import os
import re
import stat
from datetime import timedelta

import sqlalchemy as sa
from flask import current_app

from divergent.app.extensions import db
from divergent.app.models import Org, utcnow
from divergent.app.services.errors import Invalid, ServiceError
from divergent.app.services.files.volumes import data_path, org_dir, trees_dir
from divergent.terms import format_bytes

SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*(B|KB|MB|GB|TB)?", re.ASCII | re.IGNORECASE)
UNITS = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}
INODE_BYTES = 4096


class QuotaExceeded(ServiceError):
    status = 507


def parse_size(text: str) -> int | None:
    """"500GB", "1.5 TB", "none" (no quota) as an admin writes them."""
    if text.strip().lower() == "none":
        return None
    match = SIZE.fullmatch(text.strip())
    if match is None:
        raise Invalid(f"{text[:40]!r} is not a size: write it as 500GB, 2TB or none")
    return int(float(match.group(1)) * UNITS[(match.group(2) or "B").upper()])


def quota_of(org: Org) -> int | None:
    if org.storage_quota_bytes is not None:
        return org.storage_quota_bytes
    return parse_size(current_app.config["DIV_STORAGE_QUOTA"])


def set_quota(org: Org, text: str) -> Org:
    """An admin's quota for the org (`none`: the site's default)."""
    org.storage_quota_bytes = parse_size(text)
    db.session.commit()
    return org


def usage_json(org: Org) -> dict:
    measured = org.storage_measured_at
    return {"used_bytes": org.storage_used_bytes or 0, "quota_bytes": quota_of(org),
            "measured_at": measured.isoformat() if measured else None}


def usage_text(org: Org) -> str:
    quota = quota_of(org)
    used = format_bytes(org.storage_used_bytes or 0)
    return f"{used} of {format_bytes(quota)}" if quota is not None else f"{used} (no quota)"


def check_room(org: Org, adding: int = 0) -> None:
    """QuotaExceeded when the org's storage, with `adding` bytes more, would
    be over its quota."""
    quota = quota_of(org)
    used = org.storage_used_bytes or 0
    if quota is not None and used + adding > quota:
        more = f" and {format_bytes(adding)} more do not fit" if adding else ""
        raise QuotaExceeded(
            f"{org.name} uses {format_bytes(used)} of its {format_bytes(quota)} storage quota"
            f"{more}: delete files (div storage rm) or ask an admin to raise it")


def charge(org: Org, adding: int) -> None:
    """Refuses `adding` bytes over the quota; else counts them at once (one
    UPDATE, so parallel uploads add up) until the next measurement."""
    check_room(org, adding)
    if adding:
        db.session.execute(sa.update(Org).where(Org.id == org.id).values(
            storage_used_bytes=Org.storage_used_bytes + adding))
        db.session.commit()
        db.session.refresh(org)


def layout_bytes(paths: list[str]) -> int:
    """What laying out these files costs beyond their bytes, as measure()
    counts it: a block for each file and each folder they make. A path 40
    folders deep makes 40: charged, never free."""
    folders = {path.rsplit("/", depth)[0] for path in paths
               for depth in range(1, path.count("/") + 1)}
    return INODE_BYTES * (len(paths) + len(folders))


def measure(org: Org) -> int:
    """Bytes the org's volumes, trees and blobs take on disk, each inode
    once, following no link."""
    seen: set[tuple[int, int]] = set()
    total = 0
    stack = [org_dir(org), trees_dir(org), data_path("blobs", org.name)]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            continue
        for entry in entries:
            try:
                info = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            if stat.S_ISDIR(info.st_mode):
                stack.append(entry.path)
            if (info.st_dev, info.st_ino) not in seen:
                seen.add((info.st_dev, info.st_ino))
                # An inode costs a block at least: a flood of empty files counts.
                total += max(info.st_blocks * 512, INODE_BYTES)
    return total


def measure_next() -> Org | None:
    """Measures the org measured longest ago, if that was more than
    DIV_STORAGE_MEASURE_SECONDS ago (or never); returns it, or None when
    every org's measure is fresh."""
    since = utcnow() - timedelta(seconds=current_app.config["DIV_STORAGE_MEASURE_SECONDS"])
    org = db.session.execute(db.select(Org).where(
        Org.removed_at.is_(None),
        sa.or_(Org.storage_measured_at.is_(None), Org.storage_measured_at < since)).order_by(
        Org.storage_measured_at.asc().nulls_first(), Org.id).limit(1)).scalar_one_or_none()
    if org is None:
        return None
    started = utcnow()
    used = measure(org)
    # What the server wrote while it measured is in the files already.
    db.session.execute(sa.update(Org).where(Org.id == org.id).values(
        storage_used_bytes=used, storage_measured_at=started))
    db.session.commit()
    return org
