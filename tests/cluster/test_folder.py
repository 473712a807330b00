"""The cluster's folder is its user's own (`cli.cluster.folder`), checked before anything
starts: no cluster, PostgreSQL or network needed. Another user is ``nobody``, made the owner
with chown (root only)."""

from __future__ import annotations

import os
import pwd
import stat
from pathlib import Path

import pytest

from cli.cluster import control, servers, system
from cli.cluster import layout as cl
from cli.cluster.folder import check_folder, make_private, open_log, write_private
from tabula.errors import UsageError

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
NOBODY = pwd.getpwnam("nobody").pw_uid


def _check(folder: Path) -> None:
    c = cl.Cluster(folder)
    check_folder(folder, *c.kept(), shared=[c.postgres])


def test_a_new_or_own_folder_passes(tmp_path):
    _check(tmp_path / "new" / "cluster")  # nothing made yet
    folder = tmp_path / "cluster"
    make_private(folder)
    make_private(folder / "tls")
    write_private(folder / "secrets.env", "A=1\n")
    _check(folder)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700


@root_only
def test_a_folder_of_another_user_is_refused_naming_the_owner(tmp_path):
    folder = tmp_path / "cluster"
    folder.mkdir(mode=0o700)
    os.chown(folder, NOBODY, -1)
    with pytest.raises(UsageError, match=f"{folder} belongs to nobody, not to root"):
        _check(folder)


@root_only
@pytest.mark.parametrize("name", ["tls", "secrets.env", "client.env", "cluster.json"])
def test_an_entry_of_another_user_is_refused(tmp_path, name):
    folder = tmp_path / "cluster"
    make_private(folder)
    path = folder / name
    if name == "tls":
        make_private(path)
    else:
        write_private(path, "A=1\n")
    os.chown(path, NOBODY, -1)
    with pytest.raises(UsageError, match=f"{path} belongs to nobody"):
        _check(folder)


@pytest.mark.parametrize("name", [".", "tls", "secrets.env", "logs", "postgres"])
def test_a_link_is_refused(tmp_path, name):
    folder = tmp_path / "cluster"
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    if name == ".":
        folder.symlink_to(target)
        path = folder
    else:
        make_private(folder)
        path = folder / name
        path.symlink_to(target)
    with pytest.raises(UsageError, match=f"{path} is a symbolic link"):
        _check(folder)


def test_a_file_where_a_folder_belongs_is_refused(tmp_path):
    folder = tmp_path / "cluster"
    make_private(folder)
    write_private(folder / "tls", "")
    with pytest.raises(UsageError, match=f"{folder / 'tls'} is not a folder"):
        _check(folder)


@pytest.mark.parametrize("mode", [0o770, 0o707, 0o777])
def test_a_folder_that_others_may_write_in_is_refused(tmp_path, mode):
    folder = tmp_path / "cluster"
    folder.mkdir()
    folder.chmod(mode)
    with pytest.raises(UsageError, match=f"{folder} may be written by its group or others"):
        _check(folder)
    folder.chmod(0o711)  # passing through is no harm
    _check(folder)


def test_a_folder_under_one_that_others_may_write_in_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(UsageError, match=f"lies under {shared}, which its group or others"):
        _check(shared / "cluster")
    shared.chmod(0o1777)  # sticky, as /tmp: nobody else may rename or remove what lies in it
    _check(shared / "cluster")


@root_only
def test_a_folder_under_one_of_another_user_or_under_their_link_is_refused(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, NOBODY, -1)
    with pytest.raises(UsageError, match=f"lies under {theirs}, which nobody may change"):
        _check(theirs / "cluster")
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(mine)
    os.lchown(link, NOBODY, -1)
    with pytest.raises(UsageError, match=f"lies under {link}, a symbolic link of nobody"):
        _check(link / "cluster")


def test_the_default_folder_lies_in_no_folder_others_may_write_in():
    for parent in cl.DEFAULT_DIR.parents:
        if parent.exists():
            assert not parent.stat().st_mode & 0o022, parent


def test_a_private_file_is_written_past_a_planted_temporary_link(tmp_path):
    folder = tmp_path / "cluster"
    make_private(folder)
    victim = tmp_path / "victim"
    victim.write_text("untouched\n")
    (folder / "secrets.env.tmp").symlink_to(victim)
    (folder / ".secrets.env.tmp").symlink_to(victim)
    write_private(folder / "secrets.env", "A=1\n")
    assert victim.read_text() == "untouched\n"
    st = (folder / "secrets.env").lstat()
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600
    assert (folder / "secrets.env").read_text() == "A=1\n"
    # A link at the target itself is replaced, not written through.
    (folder / "client.env").symlink_to(victim)
    write_private(folder / "client.env", "B=2\n")
    assert victim.read_text() == "untouched\n"
    assert not (folder / "client.env").is_symlink()
    assert sorted(p.name for p in folder.iterdir()) == [
        ".secrets.env.tmp", "client.env", "secrets.env", "secrets.env.tmp"
    ]  # fmt: skip


def test_a_log_is_opened_without_following_a_link(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("untouched\n")
    log = tmp_path / "mlflow.log"
    log.symlink_to(victim)
    with pytest.raises(UsageError, match=f"{log} is a symbolic link"):
        open_log(log)
    assert victim.read_text() == "untouched\n"
    fresh = tmp_path / "prefect.log"
    with open_log(fresh) as f:
        f.write(b"line\n")
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o600


def test_a_started_process_makes_its_files_private_unless_told(tmp_path):
    c = cl.Cluster(tmp_path / "cluster")
    make_private(c.folder)
    for name, umask in (("private", 0o077), ("project", -1)):
        env = {"PATH": os.environ["PATH"]}
        pid = system.start(c, name, ["sh", "-c", "umask"], env, umask=umask)
        system._CHILDREN[pid].wait(timeout=30)
    assert (c.logs / "private.log").read_text().strip() == "0077"
    assert (c.logs / "project.log").read_text().strip() == f"{_umask():04o}"
    assert stat.S_IMODE((c.logs / "private.log").stat().st_mode) == 0o600
    assert stat.S_IMODE(c.logs.stat().st_mode) == 0o700


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_the_dask_members_get_no_mlflow_password(tmp_path):
    c = cl.Cluster(tmp_path / "cluster")
    make_private(c.folder)
    write_private(c.folder / "secrets.env", "".join(f"{n}=s-{n}\n" for n in cl.SECRET_NAMES))
    env = servers._dask_env(c)
    mlflow = c.secrets()["TABULA_CLUSTER_MLFLOW_PASSWORD"]
    assert mlflow not in env.values() and not [k for k in env if k.startswith("MLFLOW_")]
    assert env["PREFECT_API_AUTH_STRING"] == c.client_env()["PREFECT_API_AUTH_STRING"]
    assert mlflow in servers.client_process_env(c).values()  # the flows' worker keeps it


def test_a_warning_when_this_machine_forwards_ip(tmp_path):
    setting = tmp_path / "ip_forward"
    setting.write_text("0\n")
    assert system.forwarding_warning(setting) is None
    setting.write_text("1\n")
    warning = system.forwarding_warning(setting)
    assert warning is not None and "\n" not in warning
    assert warning.startswith("warning: IP forwarding is on") and cl.BRIDGE in warning


def test_every_command_checks_the_folder_first(tmp_path):
    folder = tmp_path / "cluster"
    folder.mkdir()
    folder.chmod(0o777)
    for command in (lambda: control.status(folder), lambda: control.restart(folder, "mlflow")):
        with pytest.raises(UsageError, match="may be written by its group or others"):
            command()


def test_up_without_the_cluster_extra_says_how_to_install_it(monkeypatch) -> None:
    """``make run`` installs the runtime only: ``up`` names the missing packages and the
    command that installs them, before it makes or starts anything."""
    import sys

    control.need_extras()  # this environment has them (make test installs .[dev])
    monkeypatch.setitem(sys.modules, "psycopg2", None)  # as if it were not installed
    with pytest.raises(UsageError) as refused:
        control.need_extras()
    assert str(refused.value) == (
        "tabula cluster needs psycopg2-binary: install its extra with "
        "`.venv/bin/pip install -c constraints.txt -e '.[cluster]'` (make test does)"
    )
