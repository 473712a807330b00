"""The GPU's busy share by stage (`tasks.gpu_use`, `tasks.run.cputime.Laps`): readings taken
while a lap runs are that lap's. The readings here come from a counter, not NVML: these tests
run on machines without a GPU, and what they check is the accounting."""

from __future__ import annotations

import itertools
import threading
import time

import pytest
import torch

from tabula.config import load_config
from tasks.gpu_use import GpuUse, gpu_use, nvml_reader
from tasks.run.cputime import Laps, stage_metrics


class _Switch:
    """A reading of 1.0 while on, else 0.0."""

    def __init__(self) -> None:
        self.on = threading.Event()

    def __call__(self) -> float:
        return 1.0 if self.on.is_set() else 0.0


def test_each_lap_gets_the_readings_made_during_it() -> None:
    switch = _Switch()
    use = GpuUse(switch, every_s=0.01)
    use.start()
    try:
        time.sleep(0.05)  # read before the laps: no lap's
        laps = Laps("rest", use)
        with laps.lap("selfplay"):
            switch.on.set()
            time.sleep(0.2)
        switch.on.clear()
        time.sleep(0.03)  # readings already made while on may still land here: few
        with laps.lap("train"):
            time.sleep(0.2)
        laps.totals()
    finally:
        use.stop()
    busy = laps.gpu_busy()
    assert busy["selfplay"] >= 0.8 and busy["train"] == 0.0
    assert set(busy) <= {"selfplay", "train", "rest"}
    metrics = stage_metrics(laps.totals(), laps.walls(), 2, busy)
    assert metrics["gpu_busy/selfplay"] == busy["selfplay"] and metrics["gpu_busy/train"] == 0.0


def test_a_reader_that_fails_stops_the_readings_and_nothing_else() -> None:
    count = itertools.count()

    def read() -> float:
        if next(count) >= 3:
            raise RuntimeError("NVML gone")
        return 0.5

    use = GpuUse(read, every_s=0.01)
    use.start()
    time.sleep(0.2)
    use.stop()
    assert use.take() == [0.5, 0.5, 0.5]


def test_laps_without_a_gpu_have_no_gpu_figures() -> None:
    laps = Laps("rest")
    with laps.lap("selfplay"):
        pass
    laps.totals()
    assert laps.gpu_busy() == {}
    assert not any(k.startswith("gpu_busy/") for k in stage_metrics(laps.totals(), laps.walls(), 2))


def test_a_run_on_the_cpu_reads_no_gpu() -> None:
    cfg = load_config(None, ["pipeline.device=cpu"])
    assert nvml_reader(cfg) is None
    with gpu_use(cfg) as use:
        assert use is None


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_nvml_reads_a_share_on_a_cuda_machine() -> None:
    read = nvml_reader(load_config(None, ["pipeline.device=cuda"]))
    assert read is not None and 0.0 <= read() <= 1.0
