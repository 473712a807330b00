"""Whom the cluster's processes run as (`cli.cluster.users`), without a cluster: a command
started through an account's prefix runs with that user's ids, its umask and environment, and
reaches this Python even where it lies in a folder other users may not enter."""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
from pathlib import Path

import pytest

from cli.cluster import users

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")

NOBODY = pwd.getpwnam("nobody")


def test_the_owner_of_a_project_without_a_home_gets_the_clusters_folder(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    os.chown(project, NOBODY.pw_uid, NOBODY.pw_gid)
    account = users.owner_account(project, tmp_path / "owner")
    assert (account.uid, account.gid, account.name) == (NOBODY.pw_uid, NOBODY.pw_gid, "nobody")
    assert account.home == account.tmp == tmp_path / "owner"  # nobody's home does not exist
    root = users.owner_account(tmp_path, tmp_path / "owner")
    assert root.uid == 0 and root.prefix() == [] and root.env() == {}


def test_a_command_runs_as_the_account_with_this_python(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    os.chown(home, NOBODY.pw_uid, NOBODY.pw_gid)
    tmp_path.chmod(0o755)
    account = users.owner_account(home, home)
    probe = "import os, sys; print(os.getuid(), os.getgid(), os.environ['HOME'], sys.version)"
    done = subprocess.run([*account.prefix(), sys.executable, "-c", probe],
                          env={**os.environ, **account.env()}, capture_output=True, text=True,
                          cwd="/", umask=0o077, check=True)  # fmt: skip
    uid, gid, env_home, version = done.stdout.split(maxsplit=3)
    assert (int(uid), int(gid), env_home) == (NOBODY.pw_uid, NOBODY.pw_gid, str(home))
    assert version.strip() == sys.version
    umask = subprocess.run([*account.prefix(), "sh", "-c", "umask"], capture_output=True,
                           text=True, umask=0o077, check=True).stdout  # fmt: skip
    assert umask.strip() == "0077"  # the view's own umask is not the process's


def test_the_view_hides_the_rest_of_a_closed_folder(tmp_path):
    """Where this Python lies under a folder closed to others (as /root), the process sees
    that folder holding the Python only."""
    view = users.interpreter_view()
    if not view:
        pytest.skip("this Python lies in folders everyone may enter")
    closed, prefix = Path(view[-2]), Path(view[-1])
    account = users.owner_account(tmp_path, tmp_path)  # root's, run through nobody's prefix
    nobody = users.Account(NOBODY.pw_uid, NOBODY.pw_gid, tmp_path, "nobody", tmp_path)
    assert account.prefix() == []
    listed = subprocess.run([*nobody.prefix(), "ls", "-A", str(closed)], capture_output=True,
                            text=True, check=True, cwd="/").stdout.split()  # fmt: skip
    assert listed == [prefix.relative_to(closed).parts[0]]
