"""The cluster's folder: whose it may be, and how its private files, folders and logs are made.

The folder holds the cluster's passwords (``secrets.env``), what ``cluster exec`` puts in a
command's environment (``client.env``) and the Dask authority's certificates (``tls/``, which
decide who may run code on the Dask workers, root's processes). Whoever else can write in it,
or in a folder above it, could plant a file there that root then reads as the cluster's own, or
a symbolic link that makes root write elsewhere. So every ``tabula cluster`` command first
checks, before it starts or makes anything (`check_folder`):

- the folder is not a symbolic link, belongs to the user who runs the command, and nobody else
  may write in it;
- every folder above it belongs to root or that user, and nobody else may write in it unless it
  has the sticky bit (as ``/tmp`` and ``/var/tmp`` have: then nobody else may rename or remove
  what lies in it); a symbolic link on the way belongs to root or that user too;
- what the cluster keeps in it (``tls/``, ``logs/``, ``secrets.env``, ...), where present, is
  no link, belongs to that user and is writable by nobody else.

The rest follows from what the checks rule out: new folders are made 0700, private files are
written under a fresh name of `tempfile.mkstemp` (which never opens a file that exists, nor a
link) and renamed over their target, and logs are opened without following a link.
"""

from __future__ import annotations

import errno
import os
import pwd
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO

from tabula.errors import UsageError


def check_folder(
    folder: Path, folders: Iterable[Path], files: Iterable[Path], shared: Iterable[Path] = ()
) -> None:
    """Refuse, in one line, a cluster folder that someone besides the user who runs this (or
    root) could change: see the module's docstring. ``folder`` is as the user gave it (made
    absolute, links not followed); ``folders`` and ``files`` are what the cluster keeps in it;
    ``shared`` are folders in it that another user may own (PostgreSQL's, the servers' user's,
    the project owner's: `cli.cluster.users`), which must not be links either. Nothing needs
    to exist yet."""
    me = os.geteuid()
    _check_ancestors(folder, me)
    if not os.path.lexists(folder):
        return
    _check_own(folder, me, folder=True)
    for paths, are_folders in ((folders, True), (files, False)):
        for path in paths:
            if os.path.lexists(path):
                _check_own(path, me, folder=are_folders)
    for path in shared:
        if os.path.islink(path):
            raise UsageError(f"{path} is a symbolic link: the cluster's folder holds no links")


def _check_ancestors(folder: Path, me: int) -> None:
    """The folders that lead to ``folder``, both as given and as the links resolve them."""
    given = [p for p in reversed(folder.parents) if os.path.lexists(p)]
    for path in given:  # a link on the way: whoever owns it may point it elsewhere
        st = path.lstat()
        if stat.S_ISLNK(st.st_mode) and st.st_uid not in (0, me):
            raise UsageError(
                f"{folder} lies under {path}, a symbolic link of {owner(st.st_uid)}: give a "
                "folder that only root or you can change"
            )
    for path in dict.fromkeys(p.resolve() for p in given if p.exists()):
        st = path.stat()
        if st.st_uid not in (0, me):
            who = owner(st.st_uid)
        elif st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
            who = "its group or others"
        else:
            continue
        raise UsageError(
            f"{folder} lies under {path}, which {who} may change (mode "
            f"{stat.S_IMODE(st.st_mode):o}): give a folder that only root or you can change"
        )


def _check_own(path: Path, me: int, folder: bool) -> None:
    st = path.lstat()
    if stat.S_ISLNK(st.st_mode):
        raise UsageError(f"{path} is a symbolic link: the cluster's folder holds no links")
    if not (stat.S_ISDIR(st.st_mode) if folder else stat.S_ISREG(st.st_mode)):
        raise UsageError(f"{path} is not a {'folder' if folder else 'plain file'}")
    if st.st_uid != me:
        raise UsageError(
            f"{path} belongs to {owner(st.st_uid)}, not to {owner(me)} who runs tabula "
            "cluster: give a folder of your own"
        )
    if st.st_mode & 0o022:
        raise UsageError(
            f"{path} may be written by its group or others (mode "
            f"{stat.S_IMODE(st.st_mode):o}): chmod go-w it, or give another folder"
        )


def owner(uid: int) -> str:
    """The user's name, or ``uid N`` for a number no user has."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def make_private(folder: Path, mode: int = 0o700) -> None:
    """Make ``folder`` with ``mode`` (by default its owner's only), or give an existing one
    that mode. A missing folder above it is made 0711: others may pass through it (a server's
    own user to its data) but not list or change it."""
    if not folder.is_dir():
        if not folder.parent.is_dir():
            make_private(folder.parent, 0o711)
        os.mkdir(folder, 0o700)
    folder.chmod(mode)


def write_private(path: Path, text: str, uid: int = -1, gid: int = -1, mode: int = 0o600) -> None:
    """Write ``text`` to ``path`` readable by its owner only (or as ``mode`` says), whole or
    not at all: under a new name (never a file or link already there), given to ``uid`` and
    ``gid`` where given, then renamed over ``path`` (a link at ``path`` is replaced, not
    followed)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            os.fchown(f.fileno(), uid, gid)
            os.fchmod(f.fileno(), mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def hand_over(folder: Path, uid: int, gid: int) -> None:
    """Make ``folder`` (its owner's only, `make_private`) and give it to ``uid``:``gid``; when
    it is root's (an older cluster's processes ran as root), with all that lies in it. That
    walk happens while the folder is still root's alone, so nobody can swap a link into it;
    links are never followed."""
    make_private(folder)
    if os.lstat(folder).st_uid == 0 and uid != 0:
        for root, dirs, files in os.walk(folder):
            for name in dirs + files:
                os.chown(os.path.join(root, name), uid, gid, follow_symlinks=False)
    os.chown(folder, uid, gid, follow_symlinks=False)


def read_env(path: Path) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    return {k.strip(): v.strip() for k, v in pairs}


def open_log(path: Path) -> BinaryIO:
    """``path`` opened to append, made readable by its owner only; a link there is refused."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UsageError(f"{path} is a symbolic link: remove it") from exc
        raise
    return os.fdopen(fd, "ab")


def append_nofollow(path: Path, text: str) -> None:
    """Append ``text`` to the existing file ``path``, never through a link."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "a") as f:
        f.write(text)
