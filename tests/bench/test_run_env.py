"""The environment of a benchmarked run (`bench.strength.run_env`): OpenMP's wait policy."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.strength import run_env


def test_the_strength_benchmark_makes_waiting_threads_sleep(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    env = run_env(tmp_path)
    assert env["OMP_WAIT_POLICY"] == "PASSIVE"
    assert env["PREFECT_HOME"] == str(tmp_path / "prefect")


def test_a_run_can_keep_openmps_own_policy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    assert "OMP_WAIT_POLICY" not in run_env(tmp_path, omp_wait=None)
    assert run_env(tmp_path, omp_wait="ACTIVE")["OMP_WAIT_POLICY"] == "ACTIVE"
