#!/usr/bin/env bash
# GPU check in two halves: measure on the GPU machine (torch only), predict anywhere.
#
#   bash benchmarks/gpu_check.sh                  # GPU machine: the measure half
#   bash benchmarks/gpu_check.sh --local PATH     # here: predict the fetched gpu_check.tgz
#                                                 #   (or its unpacked folder) and print the
#                                                 #   PASS / FAIL table
#   bash benchmarks/gpu_check.sh --cpu-dry-run    # here: both halves on CPU (tiny shape,
#                                                 #   scenarios scaled down), simpy made
#                                                 #   unimportable for the measure half
#
# Measure half (needs torch, pandas, pyarrow, matplotlib, pyyaml, pytest, xxhash: all in the
# GPU image; no simpy, no pydantic, no registry): GPU tests, calibration of the scenarios'
# model (Llama-3-8B with its 128K-token LM head) with the first scenario, then the three
# scenarios of scenarios/validation/gpu_*.yaml (transfer_bound, compute_bound, layerwise),
# two runs each. Every step has its own time limit (they add to TOTAL_S = 285 s < 5 min on
# one H200) and
# is packed into $OUT/gpu_check.tgz as soon as it finishes, so a kill leaves what was
# measured. $OUT receives only gpu_check.tgz and gpu_check.log (the device tool returns at
# most 8 files); the work tree is $WORK (default /tmp/gpu_check_work).
# Local half: hicache-lab validate --measured, then python -m validation.targets (the
# issue's GPU targets, docs/VALIDATION.md). The scenarios travel resolved
# (scenarios/validation/gpu_*.resolved.json: validated here, read there without pydantic),
# so nothing is carried. One device call, then one local command:
#   run(command="bash benchmarks/gpu_check.sh", timeout_s=330)
#   bash benchmarks/gpu_check.sh --local <files_at>/gpu_check.tgz
set -euo pipefail

MODE=gpu
LOCAL=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --cpu-dry-run) MODE=dry ;;
    --local) MODE=local; LOCAL="${2:?--local needs a path}"; shift ;;
    *) echo "gpu_check: unknown argument $1 (--cpu-dry-run | --local PATH)" >&2; exit 2 ;;
  esac
  shift
done
[[ "${GPU_CHECK_CPU_DRY_RUN:-0}" == 1 && "$MODE" == gpu ]] && MODE=dry
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python3}"
[[ -x "$ROOT/.venv/bin/python" && -z "${PYTHON:-}" && "$MODE" != gpu ]] && PY="$ROOT/.venv/bin/python"
OUT="${OUT:-$ROOT/results/gpu_check}"
WORK="${GPU_CHECK_WORK:-/tmp/gpu_check_work}"
SCENARIOS=(transfer_bound compute_bound layerwise)
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
T0=$SECONDS

# ---- local half: predict a measured folder and print the table ---------------------------
predict() {  # predict DIR (DIR/measured holds the measurement)
  local dir="$1" vout="$1/validation"
  echo "== predicting $dir/measured"
  set +e
  # --partial: a scenario killed at its time limit leaves the folder unfinished; predict
  # what was measured (gpu_check.log names what failed)
  "$PY" -m hicache.cli validate --measured "$dir/measured" --out "$vout" --partial \
    --overwrite | tee "$dir/summary.txt"
  local rc=${PIPESTATUS[0]}
  set -e
  [[ -f "$vout/validation.json" ]] || { echo "gpu_check: validate wrote nothing (exit $rc)" >&2; return 1; }
  "$PY" -m validation.targets "$vout" "${SCENARIOS[@]}" | tee -a "$dir/summary.txt"
  echo "-> $dir/summary.txt, $vout"
}

if [[ "$MODE" == local ]]; then
  if [[ -f "$LOCAL" ]]; then
    dest="$OUT/local"
    rm -rf "$dest" && mkdir -p "$dest"
    tar xzf "$LOCAL" -C "$dest"
    LOCAL="$dest/gpu_check"
  fi
  [[ -f "$LOCAL/measured/measured.json" ]] || { echo "gpu_check: $LOCAL/measured has no measured.json" >&2; exit 1; }
  [[ -f "$LOCAL/gpu_check.log" ]] && grep -E "^== |FAIL|limit" "$LOCAL/gpu_check.log" | tail -20
  predict "$LOCAL"
  exit 0
fi

# ---- measure half --------------------------------------------------------------------------
DEST="$WORK/gpu_check"
rm -rf "$DEST" && mkdir -p "$DEST/scenarios" "$OUT"
LOG="$DEST/gpu_check.log"
: >"$LOG"
rm -f "$OUT/gpu_check.tgz" "$OUT/gpu_check.log"
step() { echo "== [$((SECONDS - T0)) s] $*" | tee -a "$LOG"; }
pack() {  # everything measured so far, at once
  tar czf "$OUT/gpu_check.tgz.tmp" -C "$WORK" gpu_check 2>/dev/null \
    && mv "$OUT/gpu_check.tgz.tmp" "$OUT/gpu_check.tgz"
  cp "$LOG" "$OUT/gpu_check.log" 2>/dev/null || true
}
die() { echo "gpu_check: FAIL: $*" | tee -a "$LOG" >&2; pack; exit 1; }
trap pack EXIT
# run NAME LIMIT_S CMD...: output to the log and the terminal; the step's own time limit
run() {
  local name="$1" limit="$2"; shift 2
  local left=$((TOTAL_S - (SECONDS - T0)))
  (( left < limit )) && limit=$left
  (( limit > 5 )) || die "$name: no time left of the ${TOTAL_S} s budget"
  step "$name (limit ${limit} s)"
  set +e
  timeout "$limit" "$@" 2>&1 | tee -a "$LOG"
  local rc=${PIPESTATUS[0]}
  set -e
  pack
  [[ $rc -eq 124 ]] && die "$name: timed out after ${limit} s"
  [[ $rc -ne 0 ]] && die "$name: exit status $rc (see the log)"
  return 0
}

MPY=("$PY")
if [[ "$MODE" == dry ]]; then
  TOTAL_S=${TOTAL_S:-240}
  DEVICE=cpu; export OMP_NUM_THREADS=1
  # the GPU machine has neither simpy nor pydantic: prove the measure half imports neither
  BLOCK="$WORK/blocked"
  for m in simpy pydantic; do
    mkdir -p "$BLOCK/$m"
    echo "raise ModuleNotFoundError('$m is blocked: the measure half must not import it', name='$m')" \
      >"$BLOCK/$m/__init__.py"
  done
  MPY=(env "PYTHONPATH=$BLOCK:$PYTHONPATH" "$PY")
  step "CPU DRY RUN: device cpu, tiny shape, scenarios scaled down, simpy and pydantic blocked"
  "${MPY[@]}" -c "import simpy" 2>/dev/null && die "the simpy blocker does not work"
  "${MPY[@]}" -c "import pydantic" 2>/dev/null && die "the pydantic blocker does not work"
else
  TOTAL_S=${TOTAL_S:-285}
  DEVICE=cuda
fi
missing=$("${MPY[@]}" -c "
import importlib.util as u
print(' '.join(m for m in ('torch','pandas','pyarrow','matplotlib','yaml','pytest','xxhash')
               if u.find_spec(m) is None))")
[[ -z "$missing" ]] || die "python modules missing: $missing"
if [[ "$DEVICE" == cuda ]]; then
  "$PY" -c "import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)" \
    || die "torch sees no CUDA device (use --cpu-dry-run to check the plumbing on CPU)"
fi

# 1. scenarios, resolved (validated where they were written, so no pydantic is needed to
#    read them): the committed scenarios/validation/gpu_*.resolved.json on the GPU; for the
#    dry run the same scenarios scaled down 16x and resolved here (where pydantic is)
if [[ "$MODE" == dry ]]; then
  "$PY" - "$DEST/scenarios" "${SCENARIOS[@]}" <<'EOF' || die "could not write the scenarios"
import sys, yaml
from hicache.scenario import load_scenario, write_resolved
out, names = sys.argv[1], sys.argv[2:]
def n(x): return max(16, int(x / 16))
for name in names:
    d = yaml.safe_load(open(f"scenarios/validation/gpu_{name}.yaml"))
    c, s, w = d["cache"], d["scheduler"], d["workload"]
    c["device_tokens"] = n(c["device_tokens"])
    s["chunked_prefill_size"] = n(s["chunked_prefill_size"])
    for k in ("document_length", "prompt_length"):
        if k in w:
            w[k] = [n(v) for v in w[k]] if isinstance(w[k], list) else n(w[k])
    yaml.safe_dump(d, open(f"{out}/{name}.yaml", "w"), sort_keys=False)
    write_resolved(load_scenario(f"{out}/{name}.yaml"), f"{out}/{name}.json")
print("scenarios:", ", ".join(names), "(scaled 1/16, resolved)")
EOF
else
  for s in "${SCENARIOS[@]}"; do
    cp "scenarios/validation/gpu_$s.resolved.json" "$DEST/scenarios/$s.json"
  done
fi

# 2. GPU tests (skipped, not failed, on CPU; the module imports torch only)
run "pytest tests/gpu_backend/test_cuda.py -m gpu" 45 \
  "${MPY[@]}" -m pytest tests/gpu_backend/test_cuda.py -m gpu -q -x -p no:cacheprovider
# 3. the scenarios, two runs each, into one measured folder; the first measure also
#    calibrates the device for the scenarios' model (profile.yaml in the folder)
first=1
for s in "${SCENARIOS[@]}"; do
  limit=45
  what="measure $s"
  if [[ $first == 1 ]]; then limit=150; what="$what (calibrates first)"; fi
  run "$what" "$limit" "${MPY[@]}" -m hicache.cli measure "$DEST/scenarios/$s.json" \
    --device "$DEVICE" --out "$DEST/measured" --append --repeats 2
  first=0
done
step "measured: $DEST (packed: $OUT/gpu_check.tgz)"
pack
if [[ "$MODE" == dry ]]; then
  trap - EXIT
  predict "$DEST"
  echo "gpu_check: CPU dry run done: the plumbing works (the GPU targets FAIL or are n/a on CPU)"
fi
