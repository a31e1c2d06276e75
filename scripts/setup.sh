#!/usr/bin/env bash
# Set up hicache-lab in ./.venv (idempotent). `--test` adds what the test suite needs:
# torch (CPU wheel, pinned), the real Mooncake store (pip package + libibverbs1), Ray (sweep
# --executor ray) and Jupyter (the notebooks are executed as Jupyter runs them).
set -euo pipefail
cd "$(dirname "$0")/.."
extras="dev"
if [[ "${1:-}" == "--test" ]]; then extras="dev,torch,mooncake,ray,notebooks"; fi
[[ -x .venv/bin/python ]] || python3 -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[${extras}]"
if [[ "${1:-}" == "--test" ]]; then
  PYTHON="$PWD/.venv/bin/python" bash .ci/mooncake.sh
fi
