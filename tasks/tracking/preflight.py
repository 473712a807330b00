"""The pre-flight check of a tracking store (`require_reachable`): one that is down is refused
in seconds and one line, before a run makes anything. A line that names a store shows it
`tabula.config.without_password` (a URI field of the config holds no password, but
``MLFLOW_TRACKING_URI`` may)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from tabula.config import without_password
from tabula.errors import TabulaError, first_line
from tasks.tracking.store import connect, resolve_uri

#: The pre-flight request's bounds (`require_reachable`): MLflow's own defaults (7 retries,
#: backoff factor 2, 120 s a request) wait minutes on a store that is down; these, seconds.
PREFLIGHT_HTTP = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": 2,
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": 1,
    "MLFLOW_HTTP_REQUEST_TIMEOUT": 10,
}
#: Seconds the pre-flight check waits for a database store to accept a connection.
PREFLIGHT_CONNECT_S = 10
#: The databases MLflow keeps a tracking store in, besides SQLite (a ``+driver`` may follow).
DATABASES = ("postgresql", "mysql", "mssql")


class TrackingStoreError(TabulaError):
    """The MLflow tracking store cannot be reached (a server or database that is down)."""


def require_reachable(tracking_uri: str, project: Path | None = None) -> None:
    """Raise `TrackingStoreError` (one line: the store and the first line of the cause) when
    the store ``tracking_uri`` resolves to (`resolve_uri`) cannot be reached, within seconds.

    A tracking server (``http``, ``https``) gets one cheap request, its retries and timeout
    bounded (`PREFLIGHT_HTTP`, lower values in the environment kept, the environment restored
    after); a database (`DATABASES`) one connection, bounded by `PREFLIGHT_CONNECT_S`. A
    SQLite or file store is created on first use and is not checked: nothing is created here.
    """
    uri = resolve_uri(tracking_uri, project)
    scheme = uri.split(":", 1)[0].split("+", 1)[0].lower()
    if scheme in ("http", "https"):
        failure = _http_failure(uri)
    elif scheme in DATABASES:
        failure = _database_failure(uri, scheme)
    else:
        return
    if failure is not None:
        raise TrackingStoreError(f"MLflow store {without_password(uri)} {failure}")


def _http_failure(uri: str) -> str | None:
    """Why the first request of the process's client (`connect`) to a tracking server failed
    within the bounds, or None (the client is then kept for the run)."""
    from mlflow.exceptions import MlflowException

    before = {name: os.environ.get(name) for name in PREFLIGHT_HTTP}
    for name, bound in PREFLIGHT_HTTP.items():
        current = before[name]
        lower = current is not None and current.isdigit() and int(current) < bound
        os.environ[name] = current if lower else str(bound)
    retries = logging.getLogger("urllib3.connectionpool")  # a warning line per retry
    level = retries.level
    retries.setLevel(logging.ERROR)
    try:
        connect(uri)
    except MlflowException as error:
        return _unreachable(error)
    finally:
        retries.setLevel(level)
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    return None


def _database_failure(uri: str, scheme: str) -> str | None:
    """Why one connection to a database store failed, or None (one try: MLflow's own engine
    retries for about 100 s)."""
    import sqlalchemy
    from sqlalchemy.exc import SQLAlchemyError

    args = {"connect_timeout": PREFLIGHT_CONNECT_S} if scheme in ("postgresql", "mysql") else {}
    try:
        engine = sqlalchemy.create_engine(uri, connect_args=args)
    except ImportError as error:  # SQLAlchemy's default driver for the scheme is not installed
        return (
            f"has no database driver here: {first_line(error)} (install it, or name an "
            f"installed one, as in {scheme}+DRIVER://...)"
        )
    try:
        with engine.connect():
            pass
    except SQLAlchemyError as error:
        return _unreachable(error)
    finally:
        engine.dispose()
    return None


def _unreachable(error: BaseException) -> str:
    return (
        f"cannot be reached: {first_line(_innermost(error))} "
        "(start it, or set pipeline.mlflow_tracking_uri)"
    )


def _innermost(error: BaseException) -> BaseException:
    """The exception at the bottom of ``error``'s chain ("Connection refused" under the
    wrappers of MLflow, requests, urllib3 or SQLAlchemy)."""
    while (error.__cause__ or error.__context__) is not None:
        error = error.__cause__ or error.__context__  # type: ignore[assignment]
    return error
