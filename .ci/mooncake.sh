#!/usr/bin/env bash
# Idempotent install of what tests marked `mooncake` need, on a clean Debian machine as root:
# Debian's libibverbs1 (the Mooncake binaries link it) and the pinned non-CUDA Mooncake wheel.
# Prints what it did; safe to run repeatedly.
set -euo pipefail
cd "$(dirname "$0")/.."

PKG="mooncake-transfer-engine-non-cuda"
VERSION="0.3.13.post1"
PYTHON="${PYTHON:-python}"

if dpkg-query -W -f='${Status}' libibverbs1 2>/dev/null | grep -q "install ok installed"; then
    echo "mooncake.sh: libibverbs1 already installed"
else
    echo "mooncake.sh: installing libibverbs1 (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends libibverbs1
fi

installed="$("$PYTHON" -m pip show "$PKG" 2>/dev/null | sed -n 's/^Version: //p' || true)"
if [ "$installed" = "$VERSION" ]; then
    echo "mooncake.sh: $PKG==$VERSION already installed"
else
    echo "mooncake.sh: installing $PKG==$VERSION (was: ${installed:-absent})"
    "$PYTHON" -m pip install -q "$PKG==$VERSION"
fi

"$PYTHON" - <<'PY'
from gpu_backend.l3.service import find_binaries

bins = find_binaries()
print(f"mooncake.sh: ready: {bins.master} and {bins.client}")
PY
