#!/usr/bin/env bash
# Set up everything tar2tf needs on a fresh machine, idempotently and with caches:
#   - a virtualenv keyed by the dependency list, under ${TAR2TF_CACHE:-~/.cache/tar2tf}
#   - the steps in launch/setup.d/*.sh, in name order (system packages, aisnode, emulators,
#     the Flink job server).  Each step is cached and skips itself when done.
# Prints the path of the venv's python on its last line.  Usage: launch/bootstrap.sh [--core]
#   --core   only the venv (enough for the demo); the test command runs everything.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export TAR2TF_CACHE=${TAR2TF_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tar2tf}
mkdir -p "$TAR2TF_CACHE"
export TAR2TF_ROOT=$ROOT

for step in "$ROOT"/launch/setup.d/*.sh; do
  name=$(basename "$step")
  if [[ "${1:-}" == "--core" && "$name" != 10-* ]]; then continue; fi
  echo "[bootstrap] $name" >&2
  bash "$step" >&2
done
cat "$TAR2TF_CACHE/venv-current"
