#!/usr/bin/env bash
# One command from a fresh machine: set up everything (venv, system packages, aisnode,
# GCS emulator, Flink job server jar; all cached under ~/.cache/tar2tf) and run the tests.
# Extra arguments go to pytest, e.g. tests/run.sh -m "not slow" -q (the fast loop), or -k tar -x
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=$("$ROOT/launch/bootstrap.sh" | tail -n 1)
export TAR2TF_CACHE=${TAR2TF_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tar2tf}
export PATH="$TAR2TF_CACHE/bin:$(dirname "$PY"):$PATH"
export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-2}
cd "$ROOT"
exec "$PY" -m pytest "$@"
