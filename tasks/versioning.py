"""DVC and git lineage: the only module that calls DVC.

How lineage is kept (docs/reproducing.md):

* Every iteration of a run owns one folder, ``data/<run>/iter-NNNN/``, with one DVC-tracked
  directory per stage output (``selfplay/``, ``model/``, ``match/``) and a stage file
  ``dvc.yaml`` whose stages name the exact command, the dependencies (the self-play
  directories of the training window, the parent checkpoint), the params and the outputs.
  Prefect runs the stages itself; when one finishes, ``dvc commit`` records the hashes in the
  folder's ``dvc.lock``, and ``dvc push`` sends an iteration's outputs to the remote once its
  stages are done (`push_stages`, beside the next iteration's games). Because iteration
  i+1's stages depend on iteration i's outputs, ``dvc dag`` shows the whole chain of a run and
  ``dvc.lock`` pins every hash. The graph is acyclic: Prefect owns the loop, DVC records it.
* The small text files of a run (stage files, locks, the run's frozen ``params.yaml``, lineage
  JSON, metrics and plots, DVC's config) are committed to a branch of their own,
  ``tabula/runs/<run>``, on top of the code commit that ran them, through a private git
  index. A new run checks its branch out (the user's branch never moves, the working tree and
  the user's edits stay as they are), so ``git status`` is clean and ``dvc dag`` sees the run
  (DVC skips stage files that git ignores). Each finished iteration is also tagged
  ``tabula/<run>/iter-NNNN``. ``dvc gc`` must therefore be
  run with ``--all-branches --all-tags --all-commits`` or it would delete lineage.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import chdir, contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from model.files import write_bytes, write_text
from tabula.errors import TabulaError, first_line
from tasks.retry import retry_on_io
from tasks.run.faults import kill_point

RUN_BRANCH_PREFIX = "tabula/runs/"
REMOTE = "tabula"  # the name of the DVC remote a project's runs push to
_GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "tabula",
    "GIT_AUTHOR_EMAIL": "tabula@localhost",
    "GIT_COMMITTER_NAME": "tabula",
    "GIT_COMMITTER_EMAIL": "tabula@localhost",
}


#: The checkout this code runs from (the code whose commit lineage records).
SOURCE_DIR = Path(__file__).resolve().parents[1]


class VersioningError(TabulaError):
    """DVC or git refused an operation; the message names it."""


class LockFileError(VersioningError):
    """An iteration's ``dvc.lock`` (or another DVC file) that is not YAML or not of the shape
    DVC writes; the one line names the file and the ``git checkout`` that restores it.

    Nothing is changed: the file is left as it is for the user to restore (the run branch holds
    it as each finished iteration recorded it), and the command can then be run again."""


def _corrupt_file(project: Path, path: Path | str, why: str) -> LockFileError:
    """The error for the DVC file ``path`` (absolute, or relative to ``project``): ``why`` it
    cannot be read, and how to restore it from the run branch when it is a run's."""
    rel = Path(os.path.relpath(project / path, project))
    in_run = rel.parent.name.startswith("iter-") and len(rel.parts) >= 3
    branch = f"{RUN_BRANCH_PREFIX}{rel.parent.parent.name} " if in_run else ""
    return LockFileError(
        f"{rel}: corrupt DVC file ({why}); restore it with `git checkout {branch}-- {rel}` "
        "and run the command again"
    )


def _corrupt_dvc_file(project: Path, error: Exception) -> LockFileError | None:
    """The one-line error for DVC's own verdict on a file it could not read, else None."""
    from dvc.utils.serialize import YAMLFileCorruptedError
    from dvc.utils.strictyaml import YAMLValidationError

    if isinstance(error, YAMLFileCorruptedError):
        why = "not YAML"
    elif isinstance(error, YAMLValidationError):
        why = "not the shape DVC writes"
    else:
        return None
    return _corrupt_file(project, str(getattr(error, "path", "") or "dvc.lock"), why)


def _git(project: Path, *args: str, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        ["git", *args], cwd=project, capture_output=True, text=True, env=env, check=False
    )
    if proc.returncode != 0:
        raise VersioningError(f"git {' '.join(args[:2])} failed: {proc.stderr.strip()[:300]}")
    return proc.stdout.strip()


def is_git_repo(project: Path) -> bool:
    proc = subprocess.run(
        ["git", "rev-parse", "--show-toplevel"], cwd=project, capture_output=True, text=True
    )
    return proc.returncode == 0 and Path(proc.stdout.strip()).resolve() == project.resolve()


def code_commit(source_dir: Path = SOURCE_DIR) -> str:
    """The git commit of the code at ``source_dir`` (default: this checkout), with ``-dirty``
    when tracked files differ; "unknown" outside a git checkout. The one answer every record
    gives: checkpoint lineage, MLflow tags, run-branch commit messages."""
    try:
        sha = _git(source_dir, "rev-parse", "HEAD")
        dirty = _git(source_dir, "status", "--porcelain", "--untracked-files=no")
    except VersioningError:
        return "unknown"
    return sha + ("-dirty" if dirty else "")


def _quiet() -> None:
    """DVC logs every lock-file update at INFO; a pipeline run shows only warnings, and not
    the one per frozen stage that DVC's status gives (tasks.stage_files.FROZEN_WHY says why)."""
    logging.getLogger("dvc").setLevel(logging.WARNING)
    logging.getLogger("dvc.repo.status").setLevel(logging.ERROR)


@contextmanager
def _repo(project: Path) -> Iterator[Any]:
    """An open DVC repo, with the working directory at its root while it is used.

    DVC resolves relative targets against the working directory, not the repo root; stages
    run one at a time in a pipeline, so the brief ``chdir`` does not race with other work.
    """
    from dvc.exceptions import DvcException
    from dvc.repo import Repo

    _quiet()
    with chdir(project), Repo(str(project)) as repo:
        _mend_rwlock(repo)
        try:
            yield repo
        except DvcException as error:
            corrupt = _corrupt_dvc_file(project, error)
            if corrupt is None:
                raise
            raise corrupt from error


def _mend_rwlock(repo: Any) -> None:
    """Empty DVC's record of which processes read and write which outputs when it does not
    parse, so that a kill cannot stop the resume.

    DVC rewrites ``.dvc/tmp/rwlock`` in place (truncate, then write) under its own guard; a
    process killed between the two leaves a file that every later DVC call refuses
    (``RWLockFileCorruptedError``). The guard is taken here the same way, so no live DVC
    process is editing the file; the torn record belonged to the process that died, and DVC
    itself drops the entries of dead processes, so an empty record loses nothing.
    """
    from dvc.lock import make_lock
    from dvc.rwlock import RWLOCK_FILE, RWLOCK_LOCK

    tmp_dir = Path(repo.tmp_dir)
    path = tmp_dir / RWLOCK_FILE
    hardlink = bool(repo.config["core"].get("hardlink_lock", False))
    guard = make_lock(str(tmp_dir / RWLOCK_LOCK), tmp_dir=str(tmp_dir), hardlink_lock=hardlink)
    with guard:
        try:
            json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return
        except (json.JSONDecodeError, UnicodeDecodeError):
            logging.getLogger(__name__).warning(
                "%s was torn by a killed DVC process; starting it empty", path
            )
            write_text(path, "{}")


@contextmanager
def _unfinished_transfers_forgotten(repo: Any, kind: str) -> Iterator[None]:
    """Hold DVC's repository lock for a ``dvc push`` or ``dvc pull`` (``kind``: "push" or
    "fetch"), with what earlier ones of that kind left in DVC's data index dropped first.

    DVC lists the files a push or fetch must move in its data index (a SQLite database outside
    the project, kept between processes), one tracked output at a time, under a key made of
    the outputs' hashes; a later transfer of the same outputs that finds the key takes the list
    as whole and moves only what it names. A transfer killed while it listed (a run killed in
    an iteration's close) leaves the outputs listed so far: the next push of the iteration then
    sent its self-play games and not its model, reported no error, and ``dvc status --cloud``
    named the model as missing from the remote. DVC drops the whole index itself after a
    transfer that moved anything, so dropping these keys first costs only a listing."""
    from dvc.repo import lock_repo

    with lock_repo(repo):
        index = repo.data_index
        if index.has_node((kind,)):
            index.delete_node((kind,))
            index.commit()
        yield


def ensure_repo(project: Path, remote: str) -> None:
    """Initialise DVC in ``project`` on first use and point its default remote at ``remote``.

    A relative remote path is taken from the project root. A clone of this repository carries
    ``.dvc/config`` with the default remote (``data/.dvc-remote``); any other remote is a
    machine-local setting and goes to ``.dvc/config.local`` (ignored by git), so the committed
    config stays as it is. In a repository without ``.dvc/``, DVC's own files are unstaged
    again after ``dvc init`` so that the user's git index is left as it was.
    """
    from dvc.repo import Repo

    _quiet()
    project = project.resolve()
    git = is_git_repo(project)
    if not (project / ".dvc").is_dir():
        Repo.init(str(project), no_scm=not git)
        if git:
            subprocess.run(
                ["git", "reset", "-q", "--", ".dvc", ".dvcignore"], cwd=project, check=False
            )
    url = remote if "://" in remote else str((project / remote).resolve())
    if "://" not in remote:
        Path(url).mkdir(parents=True, exist_ok=True)
    with _repo(project) as repo:
        merged = repo.config  # every level, relative paths resolved
        now = merged.get("remote", {}).get(REMOTE, {}).get("url")
        same = now == url or ("://" not in url and now and Path(str(now)).resolve() == Path(url))
        core = merged.get("core", {})
        if same and core.get("remote") == REMOTE and core.get("autostage") is False:
            return
        with repo.config.edit("local") as conf:
            conf["remote"][REMOTE] = {"url": url}
            conf["core"]["remote"] = REMOTE
            conf["core"]["autostage"] = False


def write_stage_file(path: Path, stages: dict[str, dict[str, Any]]) -> None:
    """Write a ``dvc.yaml`` with ``stages`` atomically (temp name, then rename)."""
    write_text(path, yaml.safe_dump({"stages": stages}, sort_keys=False))


def commit_stage(project: Path, stage_file: Path, stage: str, push: bool = True) -> dict[str, str]:
    """Record a finished stage's outputs in ``dvc.lock`` (and push them); return their hashes.

    Returns ``{out path relative to the project: md5 (a ``.dir`` hash for directories)}``. A
    push that fails is one line (`_push_targets`): an `OSError` for a full or failing remote,
    which the pipeline's retry policy tries again (`tasks.retry`). The ``dvc.lock`` as it was
    is kept beside it until DVC has rewritten it (`restore_interrupted_commits`).
    """
    target = f"{stage_file.resolve().relative_to(project.resolve())}:{stage}"
    lock, before = stage_file.with_name("dvc.lock"), _before(stage_file)
    _restore_lock(lock, before)
    write_bytes(before, lock.read_bytes() if lock.exists() else b"")
    with _repo(project) as repo:
        repo.commit(target, force=True)
    before.unlink()
    if push:
        _push_targets(project, [target])
    return stage_outs(project, stage_file, stage)


def push_stages(project: Path, stage_file: Path) -> int:
    """``dvc push`` of every stage the ``dvc.lock`` beside ``stage_file`` records, in one DVC
    call (`_push_targets`: a failure is one line); the files pushed."""
    rel = stage_file.resolve().relative_to(project.resolve())
    return _push_targets(project, [f"{rel}:{stage}" for stage in read_lock(project, stage_file)])


def _before(stage_file: Path) -> Path:
    """Where `commit_stage` keeps the ``dvc.lock`` beside ``stage_file`` as it was before the
    commit under way (empty: there was none)."""
    return stage_file.with_name("dvc.lock.before")


def _restore_lock(lock: Path, before: Path) -> bool:
    """Put ``lock`` back as it was before a commit that a kill interrupted (``before`` is
    there); whether there was one to undo."""
    if not before.exists():
        return False
    if before.stat().st_size:
        os.replace(before, lock)
    else:
        lock.unlink(missing_ok=True)
        before.unlink()
    return True


def restore_interrupted_commits(run_dir: Path) -> list[Path]:
    """Undo the ``dvc.lock`` changes of every commit a kill interrupted in the run folder
    ``run_dir``; the locks restored. DVC rewrites a ``dvc.lock`` in place, so a process killed
    while it writes leaves a file that no DVC call reads; `commit_stage` keeps the lock as it
    was first, and a stage whose commit was interrupted has no marker yet, so the resume
    commits it again over the restored lock. Call it with the run's lock held, before anything
    reads the run's DVC records."""
    for kept in run_dir.glob("iter-*/.dvc.lock.before.*.tmp"):  # a kill while the lock was
        kept.unlink(missing_ok=True)  # being kept (`write_bytes`): its commit had not begun
    restored = []
    for before in sorted(run_dir.glob("iter-*/dvc.lock.before")):
        lock = before.with_name("dvc.lock")
        if _restore_lock(lock, before):
            restored.append(lock)
    return restored


def stage_outs(project: Path, stage_file: Path, stage: str) -> dict[str, str]:
    """The output hashes recorded for ``stage`` in the ``dvc.lock`` beside ``stage_file``."""
    lock = read_lock(project, stage_file).get(stage, {})
    base = stage_file.parent.resolve().relative_to(project.resolve())
    return {str(base / out["path"]): out["md5"] for out in lock.get("outs", [])}


def dir_hash(path: Path) -> str:
    """DVC's hash of a directory (``<md5>.dir``, as ``dvc.lock`` records it), computed from
    the files themselves: no repository, no lock (a stage command may use it while DVC holds
    the locks of its outputs)."""
    import hashlib

    from dvc_data.hashfile.hash_info import HashInfo
    from dvc_data.hashfile.meta import Meta
    from dvc_data.hashfile.tree import Tree

    tree = Tree()
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        md5 = hashlib.md5(file.read_bytes(), usedforsecurity=False).hexdigest()
        tree.add(file.relative_to(path).parts, Meta(size=file.stat().st_size), HashInfo("md5", md5))
    tree.digest()
    return str(tree.hash_info.value)


def stage_deps(project: Path, stage_file: Path, stage: str) -> dict[str, str]:
    """The dependency hashes recorded for ``stage`` (paths relative to the project)."""
    lock = read_lock(project, stage_file).get(stage, {})
    base = stage_file.parent.resolve()
    root = project.resolve()
    return {os.path.relpath(base / dep["path"], root): dep["md5"] for dep in lock.get("deps", [])}


def read_lock(project: Path, stage_file: Path) -> dict[str, dict[str, Any]]:
    """The stages recorded in the ``dvc.lock`` beside ``stage_file``: ``{stage: {"deps": [...],
    "outs": [...], ...}}``, each entry a mapping with a ``path`` and an ``md5``; {} when there
    is no lock yet. A lock that is not YAML or not of that shape (truncated, overwritten) is a
    `LockFileError` naming it."""
    return _read_lock_file(project, stage_file.with_name("dvc.lock"))


def _read_lock_file(project: Path, lock_path: Path) -> dict[str, dict[str, Any]]:
    if not lock_path.exists():
        return {}
    try:
        data = yaml.safe_load(lock_path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as error:
        raise _corrupt_file(project, lock_path, "not YAML") from error
    stages = data.get("stages", {}) if isinstance(data, dict) else None
    if not isinstance(stages, dict) or not all(_lock_stage(s) for s in stages.values()):
        raise _corrupt_file(project, lock_path, "not the shape DVC writes")
    return stages


def _lock_stage(stage: object) -> bool:
    """Whether a lock's stage entry has DVC's shape: lists of {path, md5} for deps and outs."""
    if not isinstance(stage, dict):
        return False
    lists = [stage.get(key) or [] for key in ("deps", "outs")]
    return all(
        isinstance(entries, list)
        and all(
            isinstance(e, dict) and isinstance(e.get("path"), str) and isinstance(e.get("md5"), str)
            for e in entries
        )
        for entries in lists
    )


def status(
    project: Path, targets: Sequence[str] | None = None, cloud: bool = False
) -> dict[str, Any]:
    """``dvc status``: empty when every recorded output matches the workspace (``cloud``: when
    the default remote holds every recorded output, ``dvc status --cloud``)."""
    with _repo(project) as repo:
        return repo.status(targets=list(targets) if targets else None, cloud=cloud)


def changed_deps(project: Path, stage_file: Path, stage: str) -> dict[str, str]:
    """Dependencies of ``stage`` whose workspace content differs from ``dvc.lock``.

    Returns ``{path relative to the project: "modified" | "deleted" | ...}``; empty when every
    input is exactly what was recorded.
    """
    target = f"{stage_file.resolve().relative_to(project.resolve())}:{stage}"
    changed: dict[str, str] = {}
    with _repo(project) as repo, repo.lock:  # (a stage's status takes the repo's lock)
        for found in repo.stage.collect(target):
            found.frozen = False  # (in memory) DVC's status leaves a frozen stage's deps out
            for entry in found.status().get(found.addressing, []):
                if isinstance(entry, dict):
                    changed.update(entry.get("changed deps", {}))
    return changed


def pull(project: Path, targets: Sequence[str]) -> None:
    """Fetch and check out ``targets`` (stage files or tracked paths) from the remote; a remote
    that is missing or lacks them is one line naming it (`VersioningError`)."""
    from dvc.exceptions import DvcException

    with _repo(project) as repo:
        url = _remote_url(repo)
        if url and "://" not in url and not Path(url).is_dir():
            raise VersioningError(
                f"DVC remote {url} does not exist: point it at the run's data with "
                f"`dvc remote modify --local {REMOTE} url PATH_OR_URL`"
            )
        try:
            with _unfinished_transfers_forgotten(repo, "fetch"):
                repo.pull(targets=list(targets), force=True)
        except DvcException as error:
            if (corrupt := _corrupt_dvc_file(project, error)) is not None:
                raise corrupt from error
            raise VersioningError(
                f"dvc pull from {url or 'the default remote'} failed for {', '.join(targets)}: "
                f"{str(error).splitlines()[0] if str(error) else type(error).__name__}"
            ) from error


def push_run(project: Path, run: str, git_remote: str) -> tuple[int, list[str]]:
    """Publish run ``run``: its stage outputs to the DVC remote (``dvc push``, iteration by
    iteration), then its run branch and iteration tags to ``git_remote`` in one atomic git
    push (data first: a lineage commit others can see always has its data in the remote).
    Returns (files pushed by DVC, git refs pushed).

    A DVC remote that fails (full, unreachable, refusing some files) is tried again as the
    pipeline's tasks are (`tasks.retry.retry_on_io`), then ends in one line (`_push_targets`);
    every step can be repeated, so a push killed or failed half way is completed by running it
    again. A branch of that name on ``git_remote`` that is not in this run's history (another
    clone's run of the same name) is refused before anything is pushed, and nothing of it is
    changed."""
    branch = f"refs/heads/{RUN_BRANCH_PREFIX}{run}"
    if not _rev(project, branch):
        raise VersioningError(f"run {run!r} has no branch {RUN_BRANCH_PREFIX}{run} to push yet")
    if not _git_ok(project, "remote", "get-url", git_remote):
        raise VersioningError(f"no git remote {git_remote!r} (add one: `git remote add ...`)")
    _refuse_another_run(project, run, git_remote, branch)
    targets = _stage_files(project, run, branch)
    pushed = 0
    for target in targets:
        pushed += retry_on_io(partial(_push_targets, project, [target]), f"dvc push of {target}")
        kill_point("push")
    tags = f"refs/tags/tabula/{run}/*"
    _push_refs(project, run, git_remote, [f"{branch}:{branch}", f"{tags}:{tags}"])
    refs = _git(project, "for-each-ref", "--format=%(refname)", branch, f"refs/tags/tabula/{run}/")
    return pushed, refs.splitlines()


def _stage_files(project: Path, run: str, branch: str) -> list[str]:
    """The iterations' stage files (``<data>/<run>/iter-NNNN/dvc.yaml``) on ``branch``, in
    order. (``git ls-tree`` takes no wildcards: the branch's files are filtered here.)"""
    files = _git(project, "ls-tree", "-r", "--name-only", branch).splitlines()
    stage_file = re.compile(rf"(^|/){re.escape(run)}/iter-\d+/dvc\.yaml$")
    return sorted(name for name in files if stage_file.search(name))


def _refuse_another_run(project: Path, run: str, git_remote: str, branch: str) -> None:
    """Refuse, in one line, to push over ``git_remote``'s branch of ``run`` when it is not in
    the local branch's history: another clone pushed a run of the same name there."""
    listed = _git(project, "ls-remote", git_remote, branch).split()
    theirs = listed[0] if listed else ""
    if not theirs or _git_true(project, "merge-base", "--is-ancestor", theirs, branch):
        return
    raise VersioningError(
        f"git remote {git_remote!r} already holds another run named {run!r} (its branch "
        f"{RUN_BRANCH_PREFIX}{run} is not in this run's history): nothing pushed; push this "
        "run to another remote, or start it again under a new name (--set pipeline.name=NAME)"
    )


def _push_refs(project: Path, run: str, git_remote: str, refspecs: list[str]) -> None:
    """``git push --atomic``: every ref or none, so a refused one (a tag another clone pushed
    meanwhile) leaves the remote as it was; refused in one line naming the remote's answer."""
    proc = subprocess.run(
        ["git", "push", "-q", "--atomic", git_remote, *refspecs],
        cwd=project,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        lines = [line.strip() for line in proc.stderr.splitlines() if line.strip()]
        why = next((line for line in lines if "rejected" in line or "error" in line), "")
        raise VersioningError(
            f"git push of run {run!r} to {git_remote!r} was refused, nothing changed there: "
            f"{why or (lines[0] if lines else f'exit {proc.returncode}')}"
        )


def _push_targets(project: Path, targets: list[str]) -> int:
    """``dvc push`` of ``targets``; the files pushed. DVC logs each file it fails to send,
    traceback and all, and then raises an error that only counts them: the failures are
    collected instead (`_TransferFailures`), the temporary files the failed copies left in a
    local remote are removed, and the error names the first failure's cause: an `OSError`
    (a full or read-only remote: retried, then exit 1 in the CLI) or a `VersioningError`."""
    from dvc.exceptions import DvcException

    failures = _TransferFailures()
    transfer_log = logging.getLogger("dvc_data.hashfile.transfer")
    transfer_log.addFilter(failures)
    try:
        with _repo(project) as repo:
            url = _remote_url(repo) or "the default remote"
            try:
                with _unfinished_transfers_forgotten(repo, "push"):
                    return int(repo.push(targets=targets) or 0)
            except (DvcException, OSError) as error:
                if (corrupt := _corrupt_dvc_file(project, error)) is not None:
                    raise corrupt from error
                _remove_partial_uploads(url, failures.errors)
                raise _push_error(url, error, failures.errors) from error
    finally:
        transfer_log.removeFilter(failures)


class _TransferFailures(logging.Filter):
    """Keeps the errors of the files DVC failed to transfer, and drops its log records of them
    (the one line of `_push_error` says what went wrong)."""

    def __init__(self) -> None:
        super().__init__()
        self.errors: list[BaseException] = []

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[1] is not None:
            self.errors.append(record.exc_info[1])
        return False


def _remove_partial_uploads(url: str, errors: Sequence[BaseException]) -> None:
    """Remove the temporary files that failed copies into the local remote ``url`` left there:
    DVC copies to a hidden random name, then renames, and leaves the copy when it fails (a full
    disk). Only the copies named by this push's own failures are removed."""
    if "://" in url:
        return
    root = Path(url).resolve()
    for error in errors:
        target = getattr(error, "filename2", None)
        if not isinstance(target, str) or not target.endswith(".tmp"):
            continue
        path = Path(target).resolve()
        if path.is_relative_to(root):
            path.unlink(missing_ok=True)


def _push_error(url: str, error: Exception, causes: Sequence[BaseException]) -> Exception:
    """The one-line error of a failed ``dvc push`` to ``url``: an `OSError` with the errno of
    the first file that failed (DVC's own error, when it failed before sending any) when that
    is an OS error (a full disk, a read-only remote), naming the remote's file where it is
    one; else a `VersioningError` naming DVC's error."""
    what = f"dvc push to {url} failed"
    count = f" ({len(causes)} files not sent)" if causes else ""
    cause = causes[0] if causes else error
    if isinstance(cause, OSError) and cause.errno:
        reason = cause.strerror or os.strerror(cause.errno)
        # The remote's file that failed, unless it is a temporary copy (removed by now).
        named = [
            f
            for f in (cause.filename, cause.filename2)
            if isinstance(f, str) and f.startswith(url) and not Path(f).name.startswith(".")
        ]
        detail = f"{reason}: {named[0]}" if named else reason
        return OSError(cause.errno, f"{what}: {detail}{count}")
    return VersioningError(f"{what}: {first_line(cause) or type(cause).__name__}{count}")


def _remote_url(repo: Any) -> str:
    """The URL of the repo's default DVC remote ('' when none is set)."""
    name = repo.config.get("core", {}).get("remote")
    return str(repo.config.get("remote", {}).get(name, {}).get("url", "")) if name else ""


def record_on_run_branch(
    project: Path,
    run: str,
    paths: Iterable[Path],
    message: str,
    tag: str | None = None,
    contents: Mapping[str, bytes] | None = None,
) -> str | None:
    """Commit ``paths`` to the branch ``tabula/runs/<run>`` and check that branch out.

    The branch starts from the commit checked out when the run first records (the code that
    ran it; an orphan only in a repository without commits). The commit is made through a
    private index; the checkout is ``git switch -c`` without its file updates: the branch's
    tree is the checked-out one plus ``paths``, which the working tree already holds, so the
    user's edits stay as they were, staged or not, and ``git status`` lists none of the run's
    files. The branch the run started from is never moved. A run resumed from another branch
    records on its run branch and leaves HEAD where it is. A ``dvc.lock`` among ``paths`` that
    does not read (`read_lock`) is a `LockFileError` and nothing is recorded.

    ``contents`` (project-relative path: bytes) are committed as given, never read from the
    working tree: files at paths every run shares, which two runs in one working tree would
    otherwise overwrite between writing and committing. Only while the run branch is checked
    out are they also written to the working tree (and the index), so ``git status`` stays
    clean; a run recording beside the checked-out one leaves them alone. Returns the new
    commit, or None when ``project`` is not a git repository.
    """
    if not is_git_repo(project):
        return None
    ref = f"refs/heads/{RUN_BRANCH_PREFIX}{run}"
    previous = _rev(project, ref)
    checked_out = _git_ok(project, "symbolic-ref", "-q", "HEAD")
    switch = not previous or checked_out == ref
    parent = previous or _rev(project, "HEAD^{commit}")  # first record: on the code commit
    rel = [str(Path(p).resolve().relative_to(project.resolve())) for p in paths]
    rel = [p for p in rel if (project / p).exists()]
    for lock in (p for p in rel if Path(p).name == "dvc.lock"):
        # A corrupt lock is never recorded: the branch keeps the last good copy to restore.
        _read_lock_file(project, project / lock)
    commit = _commit(project, parent, rel, contents or {}, message)
    _git(project, "update-ref", ref, commit, previous or "0" * 40)  # (0s: must be new)
    if tag:
        _git(project, "update-ref", f"refs/tags/{tag}", commit)
    if switch:  # HEAD on the run branch; the index learns the run's files, as committed
        _git(project, "symbolic-ref", "HEAD", ref)
        for name, data in (contents or {}).items():
            (project / name).parent.mkdir(parents=True, exist_ok=True)
            write_bytes(project / name, data)
        _git(project, "add", "-f", "--", *rel, *(contents or {}))
    return commit


def _commit(
    project: Path, parent: str, rel: list[str], contents: Mapping[str, bytes], message: str
) -> str:
    """A commit on ``parent`` (none: an orphan) of its tree plus the working tree's ``rel``
    and ``contents``, made through a private index; the commit's id."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, **_GIT_IDENTITY, "GIT_INDEX_FILE": str(Path(tmp) / "index")}
        _git(project, "read-tree", *([parent] if parent else ["--empty"]), env=env)
        _git(project, "add", "-f", "--", *rel, env=env)
        for name, data in contents.items():
            blob = _git_input(project, data, "hash-object", "-w", "--stdin")
            _git(project, "update-index", "--add", "--cacheinfo", f"100644,{blob},{name}", env=env)
        tree = _git(project, "write-tree", env=env)
        args = ["commit-tree", tree, "-m", message] + (["-p", parent] if parent else [])
        return _git(project, *args, env=env)


def _git_input(project: Path, data: bytes, *args: str) -> str:
    """A git command fed ``data`` on its standard input; its output."""
    proc = subprocess.run(["git", *args], cwd=project, input=data, capture_output=True)
    if proc.returncode != 0:
        error = proc.stderr.decode(errors="replace").strip()[:300]
        raise VersioningError(f"git {' '.join(args[:2])} failed: {error}")
    return proc.stdout.decode().strip()


def _rev(project: Path, name: str) -> str:
    """The commit ``name`` names, or '' when it names none."""
    return _git_ok(project, "rev-parse", "--verify", "-q", name)


def _git_true(project: Path, *args: str) -> bool:
    """Whether a git check (``merge-base --is-ancestor``, ...) says yes."""
    return subprocess.run(["git", *args], cwd=project, capture_output=True).returncode == 0


def _git_ok(project: Path, *args: str) -> str:
    """A git query's output, or '' when git says no (a missing ref, a detached HEAD)."""
    proc = subprocess.run(["git", *args], cwd=project, capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else ""


def require_run_files(project: Path, run: str, params: str) -> None:
    """Refuse, in one line, to start ``run`` over while its lineage (its frozen config, stage
    files and markers) is on its run branch and not in the working tree: the user switched to
    another branch after the run checked its own out."""
    if (project / params).exists() or not on_run_branch(project, run, params):
        return
    raise VersioningError(
        f"run {run!r} is recorded on branch {RUN_BRANCH_PREFIX}{run}, which is not checked out:"
        f" `git switch {RUN_BRANCH_PREFIX}{run}` to go on with it, or name a new run with --name"
    )


def run_branches(project: Path) -> list[str]:
    """The runs that have a run branch in ``project``'s git repository (none outside git)."""
    if not is_git_repo(project):
        return []
    refs = _git(project, "for-each-ref", "--format=%(refname)", f"refs/heads/{RUN_BRANCH_PREFIX}")
    prefix = f"refs/heads/{RUN_BRANCH_PREFIX}"
    return sorted(r.removeprefix(prefix) for r in refs.splitlines() if r.startswith(prefix))


def on_run_branch(project: Path, run: str, path: str) -> bool:
    """Whether the run branch of ``run`` holds ``path`` (relative to the project)."""
    if not is_git_repo(project):
        return False
    proc = subprocess.run(
        ["git", "cat-file", "-e", f"{RUN_BRANCH_PREFIX}{run}:{path}"],
        cwd=project,
        capture_output=True,
    )
    return proc.returncode == 0


def restore_from_run_branch(project: Path, run: str, paths: Sequence[str]) -> None:
    """Write the run branch's copy of ``paths`` into the working tree (for a fresh clone)."""
    ref = f"{RUN_BRANCH_PREFIX}{run}"
    listed = _git(project, "ls-tree", "-r", "--name-only", ref, "--", *paths).splitlines()
    for name in listed:
        blob = subprocess.run(
            ["git", "show", f"{ref}:{name}"], cwd=project, capture_output=True, check=True
        ).stdout
        target = project / name
        target.parent.mkdir(parents=True, exist_ok=True)
        write_bytes(target, blob)
