#!/usr/bin/env bash
# bench/gpu.sh [OUT]: the GPU machine's figures of docs/benchmarks.md ("Scaling"), in under
# 8 minutes on one CUDA GPU with 16 cores. OUT (default bench/results/gpu) gets four files:
# scale.json (every part's JSON, by part), scale.log (every part's tables), gpu.txt and
# lscpu.txt (a lent machine may send back only a few files). Run it in the project's root:
#   bench/gpu.sh                       # the pipeline's packages installed
#   bench/gpu.sh OUT                   # with a folder of wheels in .whl (air-gapped machines,
#                                      # ../shared/tools/offline_wheels.sh), installed first
# Parts (`python -m bench.scale`, its docstring says what each measures):
#   quick    the quick start's self-play on the GPU at 1, 8 and 16 worker processes;
#   cpu2     the same machine held to 2 cores and no GPU (taskset, CUDA hidden): the quick
#            start's self-play in worker processes and in threads, the baseline of the ratios;
#   gpu9     configs/9x9-gpu.yaml's self-play (256 games a worker, batches of 1,024) at 16
#            processes, and the network alone;
#   paper19  configs/19x19-paper.yaml's self-play at 16 processes, and the network alone;
#   pipeline configs/9x9-gpu.yaml's whole pipeline, 2 iterations at 16 workers;
#   quick-threads  the quick start's self-play on the GPU in 16 threads (as before processes);
#   train256, train1024  the 4x32 net's bf16 training steps on the GPU at batches of 256 (the
#            presets') and 1,024 (`python -m bench.train`): whether a bigger batch lets
#            training keep pace with self-play, where a step's CPU work sets its time.
# A part that fails or runs past its limit is reported and the next one runs.
set -u
final=${1:-bench/results/gpu}
out=$(mktemp -d)  # the parts' files, merged into $final at the end
mkdir -p "$final"
py=${PY:-python3}
if [ -d .whl ]; then
  timeout 90 "$py" -m pip install -q --no-index --no-deps --no-compile --target /tmp/tabula-site \
    .whl/*.whl > "$out/install.log" 2>&1 || echo "wheel install failed (see $out/install.log)"
  export PYTHONPATH=/tmp/tabula-site:$PWD
else
  export PYTHONPATH=$PWD
fi
export PREFECT_SERVER_ANALYTICS_ENABLED=false PREFECT_LOGGING_LEVEL=WARNING
export NUMBA_CACHE_DIR=${NUMBA_CACHE_DIR:-/tmp/tabula-numba}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$out/gpu.txt" 2>&1
lscpu > "$out/lscpu.txt" 2>&1

part() {  # part NAME LIMIT_S ARGS...: one bench.scale run, its table and JSON
  local name=$1 limit=$2
  shift 2
  local started=$SECONDS
  timeout "$limit" "$py" -m bench.scale --json "$out/$name.json" "$@" > "$out/$name.log" 2>&1
  echo "$name: exit $? in $((SECONDS - started)) s"
  tail -n 14 "$out/$name.log"
}

started=$SECONDS  # numba's kernels into the cache once (every part's processes load them)
timeout 90 "$py" -c "from bench.scale import warm_kernels; from tabula.config import load_config
for c in (None, 'configs/19x19-paper.yaml'): warm_kernels(load_config(c))" > "$out/warm.log" 2>&1
echo "numba warm-up: exit $? in $((SECONDS - started)) s"
quick=(--seconds 8 --warmup 2)
only=(--skip network --skip pipeline)
part quick 90 --workers 1,8,16 --modes process "${quick[@]}" "${only[@]}"
started=$SECONDS  # the same machine held to 2 cores, no GPU
CUDA_VISIBLE_DEVICES= timeout 60 taskset -c 0,1 "$py" -m bench.scale --json "$out/cpu2.json" \
  --workers 2 --modes process,thread "${quick[@]}" "${only[@]}" > "$out/cpu2.log" 2>&1
echo "cpu2: exit $? in $((SECONDS - started)) s"; tail -n 10 "$out/cpu2.log"
part pipeline 220 --config configs/9x9-gpu.yaml --workers 16 --pipeline-iterations 2 \
  --skip selfplay --skip network
part gpu9 50 --config configs/9x9-gpu.yaml --workers 16 --modes process "${quick[@]}" \
  --skip pipeline
part paper19 50 --config configs/19x19-paper.yaml --workers 16 --modes process "${quick[@]}" \
  --skip pipeline
part quick-threads 30 --workers 16 --modes thread "${quick[@]}" "${only[@]}"
for b in 256 1024; do
  started=$SECONDS
  timeout 45 "$py" -m bench.train --device cuda --bf16 --batch "$b" --steps 40 --rounds 1 \
    --json "$out/train$b.json" > "$out/train$b.log" 2>&1
  echo "train$b: exit $? in $((SECONDS - started)) s"; tail -n 8 "$out/train$b.log"
done
echo "total: $SECONDS s"
"$py" - "$out" "$final" <<'PY'
import json, sys
from pathlib import Path
parts, final = Path(sys.argv[1]), Path(sys.argv[2])
merged = {p.stem: json.loads(p.read_text()) for p in sorted(parts.glob("*.json"))}
(final / "scale.json").write_text(json.dumps(merged, indent=2, sort_keys=True) + "\n")
logs = [f"== {p.stem}\n{p.read_text(errors='replace')}" for p in sorted(parts.glob("*.log"))]
(final / "scale.log").write_text("\n".join(logs))
for name in ("gpu.txt", "lscpu.txt"):
    if (parts / name).exists():
        (final / name).write_text((parts / name).read_text())
PY
