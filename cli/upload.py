"""What `div run` uploads and how: the docs' file list (git's view inside a
repository, an exclusion list outside one), each file hashed, and only the
blobs the server lacks sent, several at a time."""
from __future__ import annotations

import fnmatch
import os
import stat
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from divergent.cli.api import ApiClient
from divergent.cli.follow import WaitingLine
from divergent.cli.hash_cache import HashCache
from divergent.cli.output import count
from divergent.terms import format_bytes, shown

MAX_FILE_BYTES = 256 * 1000 * 1000
PARALLEL = 8
# The docs' list of what is not uploaded outside a git repository.
EXCLUDED_DIRS = {".git", "node_modules", "__pycache__", ".venv", "venv", "dist", ".next",
                 ".mypy_cache", ".pytest_cache", ".ruff_cache", ".tox", ".nox", ".cache",
                 ".ipynb_checkpoints", ".hypothesis"}
EXCLUDED_FILES = (".DS_Store", "*.pyc", ".env*")


@dataclass(frozen=True)
class LocalFile:
    path: str          # relative, with /
    disk_path: str
    sha256: str
    size: int
    executable: bool

    def manifest_entry(self) -> dict[str, object]:
        return {"path": self.path, "sha256": self.sha256, "size": self.size,
                "executable": self.executable}


def _git_files(root: Path) -> list[str] | None:
    """Tracked plus untracked-not-ignored files, or None outside a repository."""
    try:
        done = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=root,
                              capture_output=True)
    except FileNotFoundError:
        return None
    if done.returncode != 0:
        return None
    return [p for p in done.stdout.decode("utf-8", "surrogateescape").split("\0") if p]


def walk_files(root: Path, excluded: bool = True) -> list[str]:
    """Relative paths under `root`; with `excluded`, less the docs' list.
    Links to folders are not followed."""
    files = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not (excluded and d in EXCLUDED_DIRS))
        # One relpath a folder, not a file: 10,000 of them were a tenth of a second.
        base = os.path.relpath(folder, root)
        prefix = "" if base == "." else base + os.sep
        for name in names:
            if not (excluded and any(fnmatch.fnmatchcase(name, p) for p in EXCLUDED_FILES)):
                files.append(prefix + name)
    return files


def _inside(root: Path, path: Path) -> bool:
    return path == root or root in path.parents


def regular_files(root: Path, candidates: list[str]) -> dict[str, os.stat_result]:
    """The candidates that are regular files, with / separators, each with
    its stat (the one stat a file costs). A symlink is taken as the file it
    points to when that is inside `root`; one that points out is skipped
    with a warning."""
    root = root.resolve()
    chosen = {}
    for rel in sorted(set(candidates)):
        path = os.path.join(root, rel)
        try:
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                if not _inside(root, Path(path).resolve()):
                    click.echo(f"skipped {rel}: a link to outside {root}", err=True)
                    continue
                st = os.stat(path)
        except OSError:    # git lists deleted files too
            continue
        if stat.S_ISREG(st.st_mode):   # and submodules, which are folders
            chosen[rel.replace(os.sep, "/")] = st
    return chosen


def list_files(root: Path) -> dict[str, os.stat_result]:
    """What `div run` uploads, each with its stat: git's view inside a
    repository, else the folder less the docs' exclusions."""
    candidates = _git_files(root.resolve())
    if candidates is not None:
        _warn_of_env_files(root, candidates)
    return regular_files(root, walk_files(root) if candidates is None else candidates)


def _warn_of_env_files(root: Path, candidates: list[str]) -> None:
    """Outside git a .env* file is never uploaded; inside, git's view rules,
    so one that is untracked and not ignored (a secret, most likely) goes:
    said, with the way to keep it home."""
    env_files = [p for p in candidates if fnmatch.fnmatchcase(os.path.basename(p), ".env*")]
    if not env_files:
        return
    untracked = subprocess.run(["git", "ls-files", "-o", "--exclude-standard", "-z", "--",
                                *env_files], cwd=root, capture_output=True).stdout
    for path in untracked.decode("utf-8", "surrogateescape").split("\0"):
        if path:
            click.echo(f"warning: uploading {shown(path)}: untracked and not in .gitignore "
                       "(add it there to keep it off the cluster)", err=True)


def refuse_too_large(rel: str, size: int) -> None:
    """Before a byte is sent: a file over the limit, with the guide's way."""
    if size > MAX_FILE_BYTES:
        raise click.UsageError(
            f"{rel} is {size / 1e6:.0f} MB; uploaded files may be at most 256 MB. Download "
            "large files inside a run, straight to a volume: div run --gpu cpu --no-upload "
            "-- '<download> /mnt/<volume>/...' (the volumes guide, Large files)")


def hash_file(root: Path, rel: str, st: os.stat_result, hashes: HashCache) -> LocalFile:
    path = os.path.join(root, rel)
    refuse_too_large(rel, st.st_size)
    # Executable as git counts it: an x bit set (not whether we may run it).
    return LocalFile(rel, path, hashes.sha256(rel, path, st), st.st_size,
                     bool(st.st_mode & 0o111))


def hash_files(root: Path, stats: dict[str, os.stat_result]) -> list[LocalFile]:
    """Large files in threads (hashlib releases the GIL); small ones inline,
    where a thread hand-off would cost more than the hash. A file unchanged
    since it was last hashed is not read (HashCache)."""
    hashes = HashCache(root)
    large = [rel for rel, st in stats.items() if st.st_size >= 1 << 20]
    with ThreadPoolExecutor(PARALLEL) as pool:
        hashed = dict(zip(large, pool.map(lambda rel: hash_file(root, rel, stats[rel], hashes),
                                          large), strict=True))
    files = [hashed[rel] if rel in hashed else hash_file(root, rel, st, hashes)
             for rel, st in stats.items()]
    hashes.save()
    return files


def stat_files(root: Path, paths: list[str]) -> dict[str, os.stat_result]:
    return {rel: os.stat(os.path.join(root, rel)) for rel in paths}


def upload(api: ApiClient, volume: str, files: list[LocalFile]) -> dict[str, Any]:
    """Sends what the server lacks and returns the laid-out tree (ref, files,
    bytes). Unchanged code costs one request and no bytes."""
    manifest = {"volume": volume, "files": [f.manifest_entry() for f in files]}
    answer = api.post("/code/trees", manifest)
    if "missing" not in answer:
        return answer
    by_hash = {f.sha256: f for f in files}
    missing = [by_hash[sha] for sha in answer["missing"]]
    total = sum(f.size for f in missing)
    # On a terminal, while it lasts: the line after it says what was uploaded.
    line = WaitingLine(sys.stderr.isatty())
    line.show(f"uploading {count(len(missing), 'file')}, {format_bytes(total)}")
    try:
        with ThreadPoolExecutor(PARALLEL) as pool:
            list(pool.map(lambda f: api.put_file(f"/code/blobs/{f.sha256}", f.disk_path, f.size),
                          missing))
    finally:
        line.clear()
    answer = api.post("/code/trees", manifest)
    if "missing" in answer:
        raise click.ClickException("the server still lacks some files after the upload; try again")
    return answer
