#!/usr/bin/env bash
# GPU check for one H200 (< 8 minutes, no registry): GPU tests, calibration, and
# predicted-vs-measured validation of three scenarios this script writes itself:
#   transfer_bound  L2 -> L1 loads of 8K-token documents dominate 64-token prefills
#   compute_bound   4K-token prompts without reuse, L2 backups only
#   layerwise       loads of 4K-token documents overlap 0.5-1K-token prefills layer by layer
# All use llama-3-8b (the scenario's preset), tens of requests, one batch in flight and no L3
# (the conditions under which both runtimes decide alike, so batches match by id).
#
# Usage (repo root):  bash benchmarks/gpu_check.sh              # on the GPU machine
#                     bash benchmarks/gpu_check.sh --cpu-dry-run  # here: cpu, tiny shape
#   (or GPU_CHECK_CPU_DRY_RUN=1). Writes everything under $OUT/gpu_check/ (OUT defaults to
#   results/gpu_check), packs it into $OUT/gpu_check.tgz (also on failure) beside
#   summary.txt and gpu_check.log, and prints the table last, then the issue's targets as
#   PASS / FAIL / n/a lines (validation/targets.py, docs/VALIDATION.md; the CPU dry run
#   proves the plumbing: there they FAIL or are n/a).
#
# The GPU machine has torch, pandas, pyarrow, matplotlib, pyyaml and pytest but no simpy and
# no registry. One-time, here, in the repo root (.whl/ is git-ignored):
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#     --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
#     --platform manylinux2014_x86_64 -d .whl simpy==4.1.2 pydantic==2.14.4 \
#     pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 \
#     typing-extensions==4.16.0
#   (pydantic: hicache's scenario and model schemas)
# then call the device tool with carry [".whl"] and command `bash benchmarks/gpu_check.sh`.
set -euo pipefail

DRY="${GPU_CHECK_CPU_DRY_RUN:-0}"
for arg in "$@"; do
  case "$arg" in
    --cpu-dry-run) DRY=1 ;;
    *) echo "gpu_check: unknown argument $arg (only --cpu-dry-run)" >&2; exit 2 ;;
  esac
done
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python3}"
OUT="${OUT:-$ROOT/results/gpu_check}"
DEST="$OUT/gpu_check"
WHL="${WHL_DIR:-$ROOT/.whl}"
SITE="${GPU_CHECK_SITE:-/tmp/gpu_check_site}"
mkdir -p "$DEST/scenarios"
LOG="$DEST/gpu_check.log"
: >"$LOG"
T0=$SECONDS

die() { echo "gpu_check: FAIL: $*" | tee -a "$LOG" >&2; exit 1; }
step() { echo "== [$((SECONDS - T0)) s] $*" | tee -a "$LOG"; }
# the device tool returns at most 8 files from $OUT: there, keep only the archive, the
# table and the log at the top (GPU_CHECK_KEEP_TREE=1 keeps the tree; the dry run keeps it)
pack() {
  tar czf "$OUT/gpu_check.tgz" -C "$OUT" gpu_check 2>/dev/null || true
  cp "$LOG" "$OUT/gpu_check.log" 2>/dev/null || true
  [[ -f "$DEST/summary.txt" ]] && cp "$DEST/summary.txt" "$OUT/summary.txt"
  if [[ "$DRY" != 1 && "${GPU_CHECK_KEEP_TREE:-0}" != 1 && -f "$OUT/gpu_check.tgz" ]]; then
    rm -rf "$DEST"
  fi
  return 0
}
trap pack EXIT
# run STEP_NAME LIMIT_S CMD...: output to the log and the terminal; fail fast on error/timeout
run() {
  local name="$1" limit="$2"; shift 2
  step "$name (limit ${limit} s)"
  set +e
  timeout "$limit" "$@" 2>&1 | tee -a "$LOG"
  local rc=${PIPESTATUS[0]}
  set -e
  [[ $rc -eq 124 ]] && die "$name: timed out after ${limit} s"
  [[ $rc -ne 0 ]] && die "$name: exit status $rc (see $LOG)"
  return 0
}

if [[ "$DRY" == 1 ]]; then
  DEVICE=cpu; MODEL_ARGS=(); export OMP_NUM_THREADS=1  # see tests/validation/test_cpu_loop.py
  step "CPU DRY RUN: device cpu, tiny shape, scenarios scaled down"
else
  DEVICE=cuda; MODEL_ARGS=(--model scenarios/models/llama-3-8b.yaml)
fi

# 1. packages: carried wheels for whatever is missing (simpy on the GPU machine)
if ! "$PY" -c "import simpy, pydantic" 2>/dev/null; then
  compgen -G "$WHL/*.whl" >/dev/null || die "simpy or pydantic is missing and $WHL has no wheels: \
download them here once (see this script's header) and carry .whl"
  step "installing carried wheels from $WHL into $SITE"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$SITE" "$WHL"/*.whl || die "pip could not install the wheels in $WHL"
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
missing=$("$PY" -c "
import importlib.util as u
print(' '.join(m for m in ('torch','simpy','pandas','pyarrow','matplotlib','yaml','pytest','pydantic')
               if u.find_spec(m) is None))")
[[ -z "$missing" ]] || die "python modules missing: $missing (carry them as wheels in .whl)"
if [[ "$DEVICE" == cuda ]]; then
  "$PY" -c "import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)" \
    || die "torch sees no CUDA device (use --cpu-dry-run to check the plumbing on CPU)"
  "$PY" -c "import torch; print('device:', torch.cuda.get_device_name(0), 'torch', \
torch.__version__)" | tee -a "$LOG"
fi

# 2. GPU tests (skipped, not failed, on CPU)
run "pytest tests/gpu_backend -m gpu" 150 \
  "$PY" -m pytest tests/gpu_backend -m gpu -q -x -p no:cacheprovider

# 3. calibration -> profile, checked by the simulator's loader
PROFILE="$DEST/profile-$DEVICE.yaml"
run "calibrate --device $DEVICE" 180 \
  "$PY" -m hicache.cli calibrate --device "$DEVICE" "${MODEL_ARGS[@]}" --page-size 16 \
  --name "gpu-check-$DEVICE" --out "$PROFILE"
"$PY" - "$PROFILE" "$DRY" <<'EOF' || die "calibrated profile $PROFILE does not load"
import re, sys
from sim.hardware.profile import load_profile
path, dry = sys.argv[1], sys.argv[2] == "1"
try:
    load_profile(path)
except ValueError as e:
    if not (dry and "compute_slowdown" in str(e)):
        raise
    # CPU: a copy thread can slow compute by > 100% (GIL); the loader needs < 1
    text = open(path).read()
    text = re.sub(r"(compute_slowdown: )[0-9.e+-]+", r"\g<1>0.9", text)
    open(path, "w").write(text)
    print("gpu_check: dry run: compute_slowdown clamped to 0.9 (CPU measurement >= 1)")
    load_profile(path)
EOF

# 4. three scenarios, written here (scaled down for the CPU dry run)
"$PY" - "$DEST/scenarios" "$DRY" <<'EOF' || die "could not write the scenarios"
import math, sys, yaml
out, dry = sys.argv[1], sys.argv[2] == "1"
k = 1 / 16 if dry else 1.0  # token counts scale with k
def n(x): return max(16, int(x * k))
base = {"seed": 0, "model": "llama-3-8b",
        "scheduler": {"overlap": False, "max_running_requests": 2,
                      "chunked_prefill_size": n(8192)}}
one = {**base["scheduler"], "max_running_requests": 1}
def cache(device_tokens, **kw):
    return {"page_size": 16, "device_tokens": n(device_tokens),
            "enable_hierarchical_cache": True, "hicache_ratio": 4.0,
            "hicache_write_policy": "write_through", "hicache_io_backend": "direct",
            "hicache_storage_prefetch_policy": "wait_complete", **kw}
def docs(count, doc, extra, out_len):
    return {"kind": "long_context", "count": count, "num_documents": 6,
            "document_length": n(doc), "prompt_length": [n(doc) + n(extra[0]),
                                                         n(doc) + n(extra[1])],
            "output_length": out_len, "request_rate": math.inf}
scenarios = {
    # one request in flight under memory pressure keeps backups ahead of the evictions
    # that need them (else their order races; tests/gpu_backend/test_decision_parity.py)
    "transfer_bound": {**base, "scheduler": one, "cache": cache(24576),
                       "run": {"layerwise": False},
                       "workload": docs(32, 8192, (32, 64), 4)},
    "compute_bound": {**base, "cache": cache(131072), "run": {"layerwise": True},
                      "workload": {"kind": "long_context", "count": 16,
                                   "prompt_length": n(4096), "output_length": 16,
                                   "request_rate": math.inf}},
    "layerwise": {**base, "scheduler": one, "cache": cache(12288),
                  "run": {"layerwise": True},
                  "workload": docs(32, 4096, (512, 1024), 4)},
}
for name, d in scenarios.items():
    with open(f"{out}/{name}.yaml", "w") as f:
        yaml.safe_dump({"name": name, **d}, f, sort_keys=False)
print("scenarios:", ", ".join(scenarios))
EOF

# 5. validate each
# GPU_CHECK_TORCH_TRACE=1: also a torch.profiler Chrome trace of each measured run
for s in transfer_bound compute_bound layerwise; do
  TRACE=()
  [[ "${GPU_CHECK_TORCH_TRACE:-0}" == 1 ]] && TRACE=(--torch-trace "$DEST/$s/torch_trace.json")
  run "validate $s" 90 "$PY" -m hicache.cli validate "$DEST/scenarios/$s.yaml" \
    --profile "$PROFILE" --device "$DEVICE" --out "$DEST/$s" "${TRACE[@]}"
done

# 6. the table, last
"$PY" - "$DEST" <<'EOF' | tee "$DEST/summary.txt" || die "could not summarize"
import json, sys
dest = sys.argv[1]
def f(v, spec="+.2f"):
    return "-" if v is None else format(v, spec)
head = (f"{'scenario':15} {'dec=':>4} {'batches':>9} {'step|err|':>9} {'ttft50':>7} "
        f"{'ttft90':>7} {'hidden p/m':>11} {'h2d load':>8}")
print(head); print("-" * len(head))
for s in ("transfer_bound", "compute_bound", "layerwise"):
    c = json.load(open(f"{dest}/{s}/comparison.json"))
    b, lh = c["batches"], c["load_hidden_fraction"]
    load = next((o for o in c["ops"] if (o["lane"], o["op"]) == ("h2d", "load")), {})
    print(f"{s:15} {'yes' if c['decisions_equal'] else 'NO':>4} "
          f"{b['matched']:>4}/{b['measured']:<4} {f(c['step_time']['median_abs_rel_error'], '.2f'):>9} "
          f"{f(c['ttft']['p50']['rel_error']):>7} {f(c['ttft']['p90']['rel_error']):>7} "
          f"{f(lh['predicted'], '.2f'):>5}/{f(lh['measured'], '.2f'):<5} "
          f"{f(load.get('median_abs_rel_error'), '.2f'):>8}")
print("errors: (predicted - measured) / measured; step and h2d load: median |error| per batch")
EOF
# 7. the issue's targets as PASS / FAIL / n/a lines, from the files above (validation/targets.py)
"$PY" -m validation.targets "$DEST" transfer_bound compute_bound layerwise \
  | tee -a "$DEST/summary.txt" || die "could not check the targets"
step "done: $DEST (packed: $OUT/gpu_check.tgz)"
