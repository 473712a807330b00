"""Whom the cluster's processes run as: root only for the network namespaces.

- PostgreSQL runs as its own user (``postgres``), as Debian's package sets it up.
- The servers (MLflow, Prefect) and the Dask scheduler run as a dedicated system user,
  `SERVICE_USER`, made by the first ``up`` (``useradd --system``) where it is missing: they
  run no code of the project, and whatever a flaw in one of them lets in gets that user's
  files only (MLflow's artifacts, the servers' home), not root's.
- The pool's worker, the flows it starts and the Dask workers run as the project's owner
  (the owner of the folder ``up`` is run in): they run the checkout's code and write the
  project (shards, records, git, DVC), so they get exactly its owner's rights, and a project
  of a user who is not root is left with no file of root's. A project of root's keeps them
  root's.

A process is started as its account through ``setpriv`` (util-linux), after ``ip netns
exec`` where it runs in a namespace, so that only the namespace's entry is root's. Where this
Python lies in a folder other users may not enter (pyenv's in root's home), the process first
gets a mount namespace of its own in which that folder is an empty one with only the Python
in it (`interpreter_view`): it runs the interpreter, and sees nothing else of the folder.
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from cli.cluster.layout import ClusterError

#: The system user of the servers and the Dask scheduler.
SERVICE_USER = "tabula-cluster"


@dataclass(frozen=True)
class Account:
    """A user the cluster runs processes as: its ids, the ``HOME`` its processes get, its
    name in the user database (None: a uid without an entry, whose groups are cleared), and
    its folder in the cluster's, which its processes get as ``TMPDIR`` (``/tmp`` holds what
    other users' processes left there under the names the libraries choose)."""

    uid: int
    gid: int
    home: Path
    name: str | None
    tmp: Path

    def prefix(self) -> list[str]:
        """What runs a command as this account (nothing when this process is that user)."""
        if self.uid == os.geteuid():
            return []
        groups = "--init-groups" if self.name else "--clear-groups"
        setpriv = ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", groups, "--"]
        return interpreter_view() + setpriv

    def env(self) -> dict[str, str]:
        """The variables that name this user to its processes."""
        if self.uid == os.geteuid():
            return {}
        name = self.name or str(self.uid)
        return {"HOME": str(self.home), "USER": name, "LOGNAME": name, "TMPDIR": str(self.tmp)}


#: Run by ``sh -c`` as root in a new mount namespace: ``$1`` (a folder others may not enter)
#: becomes an empty folder, readable by all, holding only ``$2`` (the Python below it, opened
#: before it is hidden), then the rest of the arguments runs, with the umask it was given.
_VIEW = (
    'set -e; m=$(umask); umask 022; exec 3<"$2"; mount -t tmpfs -o mode=0755 tabula-view "$1"; '
    'mkdir -p "$2"; mount --no-canonicalize --bind /proc/self/fd/3 "$2"; exec 3<&-; '
    'umask "$m"; shift 2; exec "$@"'
)


def interpreter_view() -> list[str]:
    """What makes this Python (``sys.base_prefix``) reachable to another user where a folder
    above it is closed to others: see the module's docstring; nothing where none is."""
    prefix = Path(sys.base_prefix).resolve()
    for folder in list(reversed(prefix.parents))[1:]:
        if not folder.stat().st_mode & stat.S_IXOTH:
            return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", _VIEW,
                    "sh", str(folder), str(prefix)]  # fmt: skip
    return []


def service_account(home: Path) -> Account:
    """`SERVICE_USER`, made where missing; its processes' ``HOME`` and ``TMPDIR`` are
    ``home`` (a folder of the cluster's, since a system user has none). Raises ClusterError,
    in one line, when it can be neither found nor made."""
    try:
        entry = pwd.getpwnam(SERVICE_USER)
    except KeyError:
        _make_service_user()
        entry = pwd.getpwnam(SERVICE_USER)
    return Account(entry.pw_uid, entry.pw_gid, home, SERVICE_USER, home)


def _make_service_user() -> None:
    useradd = shutil.which("useradd") or "/usr/sbin/useradd"
    argv = [useradd, "--system", "--user-group", "--no-create-home", "--home-dir",
            "/nonexistent", "--shell", "/usr/sbin/nologin", "--comment",
            "tabula cluster servers", SERVICE_USER]  # fmt: skip
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    except OSError as exc:
        raise ClusterError(f"cannot make the system user {SERVICE_USER}: {exc}") from exc
    if done.returncode != 0:
        why = " ".join(done.stderr.split())[-200:]
        raise ClusterError(
            f"cannot make the system user {SERVICE_USER} (useradd --system): {why}; make it, "
            "or run tabula cluster where users can be added"
        )
    try:
        pwd.getpwnam(SERVICE_USER)
    except KeyError:
        raise ClusterError(f"useradd made no user {SERVICE_USER}") from None


def owner_account(project: Path, folder: Path) -> Account:
    """The owner of ``project``: its processes' ``HOME`` is the owner's own where that is a
    folder of theirs, else ``folder`` (a user such as ``nobody`` has none), their
    ``TMPDIR`` ``folder``."""
    st = project.stat()
    try:
        entry = pwd.getpwuid(st.st_uid)
    except KeyError:
        return Account(st.st_uid, st.st_gid, folder, None, folder)
    home = Path(entry.pw_dir)
    if not home.is_dir() or home.stat().st_uid != st.st_uid:
        home = folder
    return Account(entry.pw_uid, entry.pw_gid, home, entry.pw_name, folder)
