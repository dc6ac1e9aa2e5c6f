#!/usr/bin/env bash
# One command from a fresh machine: set up (cached venv) and run the main job on the
# embedded demo shards: 4 tars of real-photo JPEGs + labels -> size-bounded TFRecords,
# then verify them against the manifest.  Output goes to ./demo-out (or $1); the README's
# Quick start writes ./out, so running both in the README's order needs no --overwrite.
set -euo pipefail
# readlink: this checkout's root also when the script is reached through a symlink
ROOT=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)
OUT=${1:-demo-out}
PY=$("$ROOT/launch/bootstrap.sh" --core | tail -n 1)
BIN=$(dirname "$PY")
export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-2}
set -x
"$BIN/tar2tf" convert "$ROOT/launch/demo/shards/demo-{0..3}.tar" \
  --output "$OUT/demo-{}.record" --max-shard-size 200KB --type-map cls:int64 --overwrite
"$BIN/tar2tf" verify "$OUT/demo.record.manifest.json"
