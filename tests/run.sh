#!/usr/bin/env bash
# One command from a fresh machine: set up what the selected tests need (all cached under
# ~/.cache/tar2tf) and run them.  Arguments go to pytest.  With none, the whole suite and the
# whole set-up (venv, system packages, aisnode, GCS emulator, Flink).  With a selection,
# only what it needs (launch/bootstrap.sh --for-tests): the fast loop `tests/run.sh
# tests/unit -q` builds the venv and nothing else; tests/stores adds the servers,
# tests/cluster Flink.
#   tests/run.sh --plan ARGS   print which set-up steps ARGS need; run nothing
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [[ "${1:-}" == --plan ]]; then
  shift
  exec "$ROOT/launch/bootstrap.sh" --plan --for-tests "$@"
fi
PY=$("$ROOT/launch/bootstrap.sh" --for-tests "$@" | tail -n 1)
export TAR2TF_CACHE=${TAR2TF_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tar2tf}
export PATH="$TAR2TF_CACHE/bin:$(dirname "$PY"):$PATH"
export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-2}
cd "$ROOT"
exec "$PY" -m pytest "$@"
