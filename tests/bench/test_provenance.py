"""Provenance of the strength benchmark's JSON (`bench.provenance`): the commit, the CPU model,
whether the machine was shared, measured, and compute in units that do not depend on the CPU."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.provenance import (
    Sharing,
    Snapshot,
    busy_seconds,
    commit,
    compute,
    cpu_model,
    machine,
    merged,
    pace,
)

ROOT = Path(__file__).resolve().parents[2]

CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 9B14
flags\t\t: fpu avx512f

processor\t: 1
model name\t: AMD EPYC 9B14
"""


def test_the_cpu_model_is_read_from_cpuinfo() -> None:
    assert cpu_model(CPUINFO) == "AMD EPYC 9B14"
    assert cpu_model("processor : 0\n") == "unknown"
    here = machine()
    assert here["cores"] == os.cpu_count() and here["cpu_model"]


def test_busy_seconds_leave_idle_and_iowait_out() -> None:
    stat = "cpu  100 20 30 5000 40 1 2 3 0 0\ncpu0 50 10 15 2500 20 0 1 1 0 0\n"
    assert busy_seconds(stat, 100.0) == pytest.approx((100 + 20 + 30 + 1 + 2 + 3) / 100)
    with pytest.raises(ValueError):
        busy_seconds("intr 1 2 3\n", 100.0)


def test_the_commit_is_this_checkout() -> None:
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()  # fmt: skip
    got = commit(ROOT)
    assert got["commit"] == head and isinstance(got["dirty"], bool)
    assert commit(Path("/")) == {"commit": None, "dirty": False}


def test_another_process_busy_during_a_run_marks_it_shared() -> None:
    """Measured, not assumed: another process spins a core for a while; the run's own CPU is
    nil, so what the machine spent is the others', and the run was shared."""
    start = Snapshot.now()
    began = time.monotonic()
    spin = "import time\nend = time.process_time() + 0.6\nwhile time.process_time() < end: pass"
    subprocess.run([sys.executable, "-c", spin], check=True)
    sharing = Sharing.between(start, Snapshot.now(), 0.0, time.monotonic() - began,
                              os.cpu_count() or 1)  # fmt: skip
    assert sharing.others_cpu_s >= 0.4 and sharing.shared
    quiet = Sharing.between(Snapshot(10.0, 0.1), Snapshot(20.0, 0.2), 10.0, 100.0, 2)
    assert quiet.others_cpu_s == 0.0 and not quiet.shared  # all of it was the run's own


def test_invocations_of_a_resumed_run_merge() -> None:
    a = Sharing.between(Snapshot(0.0, 1.0), Snapshot(120.0, 1.5), 100.0, 100.0, 2).to_dict()
    b = Sharing.between(Snapshot(0.0, 0.5), Snapshot(100.0, 0.7), 100.0, 100.0, 2).to_dict()
    both = merged([a, b])
    assert both is not None and merged([]) is None
    assert both["others_cpu_s"] == 20.0 and both["others_share"] == pytest.approx(0.05)
    assert (both["load_start"], both["load_end"], both["shared"]) == (1.0, 0.7, True)


def test_compute_counts_evaluations_samples_and_iterations() -> None:
    work = compute(3, 1000, 4000, 250, 12, 256)
    assert work == {"iterations": 3, "selfplay_evaluations": 1000, "selfplay_simulations": 4000,
                    "selfplay_positions": 250, "trained_steps": 12,
                    "trained_samples": 12 * 256}  # fmt: skip


def test_a_run_records_its_config_overrides_and_resolved_settings(tmp_path: Path) -> None:
    from bench.strength import provenance
    from bench.strength_configs import CONFIGS
    from tabula.config import dump_config, load_config
    from tasks.run.layout import RunLayout

    layout = RunLayout(tmp_path, "data", "strength-default")
    layout.params.parent.mkdir(parents=True, exist_ok=True)
    cfg = load_config(ROOT / CONFIGS["default"].file, list(CONFIGS["default"].overrides))
    layout.params.write_text(dump_config(cfg))
    sharing = Sharing.between(Snapshot(0.0, 0.1), Snapshot(50.0, 0.2), 50.0, 60.0, 2)
    ran = [{"commit": "a" * 40, "dirty": False}, {"commit": "b" * 40, "dirty": True}]
    got = provenance("default", layout, {"sharing": [sharing.to_dict()], "commits": ran}, [])
    assert got["commits"] == ran  # each invocation's code, a resume's too
    assert provenance("default", layout, {}, [])["commits"] == []  # (not recorded before)
    assert got["overrides"] == list(CONFIGS["default"].overrides)
    resolved = got["resolved_config"]
    assert resolved["selfplay.temperature_moves"] == cfg.resolve().selfplay.temperature_moves
    assert resolved["training.lr_values"] is not None and got["sharing"]["shared"] is False
    assert got["compute"]["iterations"] == 0


def test_pace_compares_the_last_third_of_a_run_with_its_first() -> None:
    # the first iteration also paid for start-up, so it does not count
    steady = pace([2_000.0, 9_400, 9_300, 9_500, 9_200, 9_000, 8_900])
    assert steady == {"first_third": 9_350.0, "last_third": 8_950.0, "share": 0.9572,
                      "slowed": False}  # fmt: skip
    slowed = pace([3_000.0, 8_900, 8_800, 8_700, 6_300, 5_500, 5_700])
    assert slowed is not None and slowed["slowed"] and slowed["share"] < 0.85
    assert slowed["last_third"] == 5_600.0
    assert pace([3_000.0, 9_000, 9_000]) is None  # too few to have thirds
