"""How busy the GPU is while an iteration runs: NVML's utilisation, sampled.

NVML (what ``nvidia-smi`` shows, read through ``torch.cuda.utilization``) reports the share of
the last sample period in which the GPU ran a kernel, for the whole device: other processes'
kernels count too. `GpuUse` reads it every ``every_s`` seconds in a thread of its own; the
iteration's stage laps (`tasks.run.cputime.Laps`) take the readings made during each lap, so
each stage gets the mean of its own: ``gpu_busy/STAGE`` in MLflow, ``Spent.gpu_busy`` in
``budget.json`` and the closing table's line (`cli.report`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from tabula.config import Config

#: Seconds between two readings: NVML's own sample period is about this (1/6 s to 1 s).
EVERY_S = 0.2


class GpuUse:
    """Readings of ``read()`` (a share in [0, 1]) every ``every_s`` seconds from `start` to
    `stop`; `take` hands over those made since the last `take`."""

    def __init__(self, read: Callable[[], float], every_s: float = EVERY_S) -> None:
        self.read, self.every_s = read, every_s
        self._readings: list[float] = []
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="tabula-gpu-use", daemon=True)

    def _sample(self) -> None:
        while not self._stopped.wait(self.every_s):
            try:
                value = float(self.read())
            except Exception:  # NVML gone (a driver reset): no more readings
                return
            with self._lock:
                self._readings.append(value)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join()

    def take(self) -> list[float]:
        """The readings made since the last call."""
        with self._lock:
            taken, self._readings = self._readings, []
        return taken


def nvml_reader(cfg: Config) -> Callable[[], float] | None:
    """NVML's utilisation of the GPU the run uses, as a share; None when the run uses no GPU
    (``pipeline.device``, or no CUDA) or NVML cannot be read."""
    import torch

    if cfg.pipeline.device == "cpu" or not torch.cuda.is_available():
        return None

    def read() -> float:
        return torch.cuda.utilization() / 100.0

    try:
        read()
    except Exception:  # no NVML library (pynvml) or no permission: no figure, the run goes on
        return None
    return read


@contextmanager
def gpu_use(cfg: Config) -> Iterator[GpuUse | None]:
    """A started `GpuUse` of the run's GPU for the block (None without one), stopped after."""
    read = nvml_reader(cfg)
    if read is None:
        yield None
        return
    use = GpuUse(read)
    use.start()
    try:
        yield use
    finally:
        use.stop()
