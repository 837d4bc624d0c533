"""Whose Unix user a job runs as: its org's own, or a mapped member's own
(`flask site --submit-as member`), never the server's
(docs/admins/identity.md). The org's user and group are made through the
site's one root helper (deploy/divergent-org-user, which deploy/sudoers
lets the server run) unless the site's directory has them; the org's
folders on the share are opened to the org's group by POSIX ACLs, with a
default entry that keeps the server's own access to what jobs make there,
so a file either side makes stays the other's to read and no other org's
user reaches any of it."""
from __future__ import annotations

import grp
import os
import pwd
import stat
import subprocess
import threading

from divergent.app.extensions import db
from divergent.app.models import Org, User
from divergent.app.services.errors import Invalid, Unavailable
from divergent.app.services.files.volumes import data_path
from divergent.app.services.site.settings import UNIX_NAME, Identity
from divergent.app.services.site.slurm_access import current_site, ensure_org_account, is_standing_in

HELPER = "/usr/local/sbin/divergent-org-user"
# Every org's user (and every mapped member) is in it: the sudoers rule's
# Runas list, and the one group the share's parent folders let through.
RUNAS_GROUP = "div-orgs"
# The org's folders on the share, and what its jobs may do in each: write
# volumes, state folders and sweeps' files; read the code trees and blobs,
# which only the server writes.
ORG_FOLDERS = {"share": "rwX", "runs": "rwX", "sweeps": "rwX", "trees": "rX", "blobs": "rX"}
# Where the server makes each run's and sweep's state folder: sticky.
STICKY = ("runs", "sweeps")
# The transfer program's folder: every org's jobs read it.
TOOLS = "tools"
ACL_DEFAULT = "system.posix_acl_default"

_ready: set[tuple[str, str, str]] = set()
_lock = threading.Lock()


class IdentityUnavailable(Unavailable):
    """The Unix user a job would run as cannot be made ready: nothing was
    submitted."""


def identity() -> Identity:
    return current_site().identity


def job_user(user: User) -> str | None:
    """The Unix user `user`'s jobs run as: a mapped member's own where the
    site submits as members, else the org's; None where the site has not
    yet moved off the server's own (submit_as = "service")."""
    site = identity()
    if site.submit_as == "service":
        return None
    if site.submit_as == "member" and user.unix_name:
        return user.unix_name
    return site.user_of_org(user.org.name)


def ready_for_jobs(user: User) -> str | None:
    """The Unix user `user`'s jobs run as, ready for a job: made, in the
    org's group, the org's folders open to it, in the org's Slurm account.
    Once a process for each; None: the server's own (or a stand-in Slurm's,
    which has no Unix users)."""
    name = job_user(user)
    org = user.org
    if name is None or is_standing_in():
        ensure_org_account(org)
        return None
    key = (data_path(), org.name, name)
    with _lock:
        if key not in _ready:
            org_user = ready_org(org)
            if name != org_user:
                _member_in_group(org_user, name)
            _ready.add(key)
    ensure_org_account(org, users=(name,))
    return name


def ready_org(org: Org) -> str:
    """The org's Unix user, made if missing, and its folders open to it."""
    org_user = identity().user_of_org(org.name)
    make_org_user(org_user)
    open_org_folders(org, org_user)
    return org_user


def move_to_own_users(orgs: list[Org]) -> list[str]:
    """What `flask site --submit-as org` does on a site whose jobs ran as
    the server: each org's user made, its folders (and what earlier jobs
    left in them, all the server's) opened to its group, the user put in
    its Slurm account. A line for each org, saying what was done."""
    lines = []
    for org in orgs:
        name = identity().user_of_org(org.name)
        made = not _exists(name)
        ready_org(org)
        ensure_org_account(org, users=(name,))
        lines.append(f"{org.name}: its jobs run as {name}{' (made now)' if made else ''}; "
                     f"its folders are open to group {name}")
    return lines


def map_member(user: User, unix_name: str | None) -> None:
    """`user`'s jobs run as Unix user `unix_name` where the site submits as
    members (None: as the org's); it must exist here."""
    if unix_name is not None:
        if not UNIX_NAME.fullmatch(unix_name) or unix_name == "root":
            raise Invalid(f"{unix_name!r} is not a member's Unix user name")
        if not _exists(unix_name):
            raise Invalid(f"no Unix user {unix_name} on this host (the site's directory "
                          "must have it here and on every node)")
        taken = db.session.execute(db.select(User).where(
            User.unix_name == unix_name, User.id != user.id)).scalars().first()
        if taken is not None:
            raise Invalid(f"{unix_name} is {taken.username}'s (of {taken.org.name}) already: "
                          "one Unix user, one member")
    was = user.unix_name
    user.unix_name = unix_name
    db.session.commit()
    if was and was != unix_name:
        leave_org(user.org, was)


def leave_org(org: Org, unix_name: str) -> None:
    """A member's Unix user out of the org's group again (unmapped, or
    removed): their own shell no longer reaches the org's folders."""
    if identity().make_users and identity().submit_as != "service":
        with _lock:
            _ready.discard((data_path(), org.name, unix_name))
        _helper("leave", identity().user_of_org(org.name), unix_name)


def _helper(*args: str) -> None:
    """The site's root helper, through sudo (root runs it directly)."""
    argv = [HELPER, *args] if os.geteuid() == 0 else ["sudo", "-n", HELPER, *args]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise IdentityUnavailable(f"{HELPER}: {exc}: install it (deploy/install-identity)") from None
    if done.returncode != 0:
        raise IdentityUnavailable(f"{HELPER} {' '.join(args)}: "
                                  f"{done.stderr.strip() or f'exit code {done.returncode}'}")


def _exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def make_org_user(name: str) -> None:
    """The org's Unix user and its group of the same name, made if missing
    (by the helper, or said to be the site's directory's to make)."""
    if _exists(name):
        return
    if not identity().make_users:
        raise IdentityUnavailable(f"Unix user {name} does not exist: the site's directory "
                                  "makes each org's user (make_users = false)")
    _helper("make", name)


def _member_in_group(org_user: str, member: str) -> None:
    if not _exists(member):
        raise IdentityUnavailable(f"Unix user {member} (a member's, flask user-unix-name) does "
                                  "not exist on this host")
    if member in grp.getgrnam(org_user).gr_mem and member in grp.getgrnam(RUNAS_GROUP).gr_mem:
        return
    if not identity().make_users:
        raise IdentityUnavailable(f"{member} is not in groups {org_user} and {RUNAS_GROUP}: the "
                                  "site's directory puts them there (make_users = false)")
    _helper("member", org_user, member)


def _setfacl(*args: str) -> None:
    done = subprocess.run(["setfacl", *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise IdentityUnavailable(f"setfacl {' '.join(args)}: {done.stderr.strip()}")


def _has_default_acl(path: str) -> bool:
    try:
        return bool(os.getxattr(path, ACL_DEFAULT, follow_symlinks=False))
    except OSError:
        return False


def _open_tree(path: str, entry: str) -> None:
    """`entry` (g:GROUP:PERMS) on the folder, everything in it, and as the
    default of every folder in it; links are never followed (-P), and the
    default on the top folder goes last: it marks the tree as done."""
    server = pwd.getpwuid(os.geteuid()).pw_name
    folders = ["-d", "-m", f"{entry.replace('X', 'x')},u:{server}:rwx"]
    _setfacl("-R", "-P", "-m", entry, path)
    done = subprocess.run(["find", "-P", path, "-mindepth", "1", "-type", "d", "-exec",
                           "setfacl", *folders, "{}", "+"], capture_output=True, text=True)
    if done.returncode != 0:
        raise IdentityUnavailable(f"setfacl -d in {path}: {done.stderr.strip()}")
    _setfacl(*folders, path)


def open_org_folders(org: Org, group: str) -> None:
    """The org's folders on the share, made and opened to its group (with
    what is in them already, once); the folders above them let every org's
    group through, to its own and no further."""
    os.makedirs(data_path(TOOLS), exist_ok=True)
    for top, perms in {**ORG_FOLDERS, TOOLS: "rX"}.items():
        path = data_path(top) if top == TOOLS else data_path(top, org.name)
        os.makedirs(path, exist_ok=True)
        _let_through(os.path.dirname(path))
        if not _has_default_acl(path):
            _open_tree(path, f"g:{RUNAS_GROUP if top == TOOLS else group}:{perms}")
        if top in STICKY:
            # The state folders the server makes in it stay where it made
            # them: no job renames one away to put a link in its place.
            os.chmod(path, stat.S_IMODE(os.stat(path).st_mode) | stat.S_ISVTX)


def _let_through(folder: str) -> None:
    """`folder` and each above it let the org groups' members through
    (search, never list), as the share's folders for jobs to reach theirs:
    already, for everyone, or by an ACL entry where the server owns it."""
    while True:
        info = os.stat(folder)
        if not info.st_mode & stat.S_IXOTH:
            if info.st_uid != os.geteuid():
                raise IdentityUnavailable(f"{folder} lets no org's jobs through: `setfacl -m "
                                          f"g:{RUNAS_GROUP}:x {folder}` (or chmod o+x) as root")
            _setfacl("-m", f"g:{RUNAS_GROUP}:x", folder)
        parent = os.path.dirname(folder)
        if parent == folder:
            return
        folder = parent
