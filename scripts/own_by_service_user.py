"""Gives the service user its folders and what an earlier root-run command
left in them (scripts/services, as root). Everything goes through
descriptors opened without following links (os.fwalk, fchown, lchown
relative to a folder's descriptor), because the service user, and so every
job, can write in these folders: a link it puts in place of a folder or a
file must never lead root's chown anywhere else.

    own_by_service_user.py USER --private DIR...
    find DIR -user root -print0 | own_by_service_user.py USER --tree DIR

--private: the folder itself and what is directly in it become the user's,
mode go-rwx unless an ACL says who else may enter (instance/, the pid
folder). --tree: the paths on stdin, all
below DIR (the data folder), become the user's, each reached from DIR's
descriptor a folder at a time, so no depth of folders costs more than two
descriptors."""
from __future__ import annotations

import argparse
import os
import pwd
import stat
import sys

FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def open_folder(path: str) -> int:
    try:
        return os.open(path, FOLDER)
    except OSError as exc:
        sys.exit(f"scripts/services: {path} is not a folder ({exc.strerror}): "
                 "a link there is refused, not followed")


def own(fd: int, name: str | None, uid: int, gid: int, private: bool) -> None:
    """Chowns (and with `private`, chmods) one entry of the folder `fd`, or
    the folder itself when `name` is None; never through a link."""
    st = os.fstat(fd) if name is None else os.stat(name, dir_fd=fd, follow_symlinks=False)
    if st.st_uid != uid or st.st_gid != gid:
        if name is None:
            os.fchown(fd, uid, gid)
        else:
            os.chown(name, uid, gid, dir_fd=fd, follow_symlinks=False)
    # A folder the server opened to org users by an ACL (the data folder
    # inside instance/ lets their groups through) keeps it: chmod would
    # clear the ACL's mask.
    if private and not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o077 and \
            not _has_acl(fd, name):
        mode = stat.S_IMODE(st.st_mode) & ~0o077
        if name is None:
            os.fchmod(fd, mode)
        else:
            os.chmod(name, mode, dir_fd=fd, follow_symlinks=False)


def _has_acl(fd: int, name: str | None) -> bool:
    try:
        if name is None:
            return bool(os.getxattr(fd, "system.posix_acl_access"))
        # getxattr takes no dir_fd: the name under the folder's descriptor.
        return bool(os.getxattr(f"/proc/self/fd/{fd}/{name}", "system.posix_acl_access",
                                follow_symlinks=False))
    except OSError:
        return False


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("user")
    parser.add_argument("--private", nargs="*", default=[])
    parser.add_argument("--tree")
    args = parser.parse_args()
    user = pwd.getpwnam(args.user)
    uid, gid = user.pw_uid, user.pw_gid
    for path in args.private:
        fd = open_folder(path)
        own(fd, None, uid, gid, private=True)
        for name in os.listdir(fd):
            own(fd, name, uid, gid, private=True)
        os.close(fd)
    if args.tree:
        root = open_folder(args.tree)
        for path in sys.stdin.buffer.read().split(b"\0"):
            if path:
                own_below(root, os.path.relpath(os.fsdecode(path), args.tree), uid, gid)
        os.close(root)


def own_below(root: int, rel: str, uid: int, gid: int) -> None:
    if rel == ".":
        own(root, None, uid, gid, private=False)
        return
    *folders, name = rel.split("/")
    fd = root
    try:
        for folder in folders:
            below = os.open(folder, FOLDER, dir_fd=fd)
            if fd != root:
                os.close(fd)
            fd = below
        own(fd, name, uid, gid, private=False)
    except OSError:
        pass   # gone, or a link now where a folder was: left as it is
    finally:
        if fd != root:
            os.close(fd)


if __name__ == "__main__":
    main()
