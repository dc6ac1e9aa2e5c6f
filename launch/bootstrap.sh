#!/usr/bin/env bash
# Set up what tar2tf needs on a fresh machine, idempotently and with caches:
#   - a virtualenv keyed by the dependency list, under ${TAR2TF_CACHE:-~/.cache/tar2tf}
#   - the steps in launch/setup.d/*.sh, in name order (system packages, aisnode, emulators,
#     the Flink job server).  Each step is cached and skips itself when done.
# Prints the path of the venv's python on its last line.
# Usage: launch/bootstrap.sh [--plan] [--core | --for-tests [PYTEST-ARGS...]]
#   (none)       every step
#   --core       only the venv (enough for the demo)
#   --for-tests  what the tests PYTEST-ARGS select need (tests/run.sh): the steps without a
#                "# setup-for-marker: M" line always, a step with one only when a selected
#                test is marked M (found by collecting them with pytest in the venv, which
#                marks a test by the server fixtures it uses: tests/conftest.py).  No
#                PYTEST-ARGS: every step.  So `tests/run.sh tests/unit` builds no server.
#   --plan       print "run STEP" or "skip STEP (why)" per step, one a line ("maybe STEP"
#                when that takes a venv to tell and there is none yet); run nothing
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export TAR2TF_CACHE=${TAR2TF_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tar2tf}
export TAR2TF_ROOT=$ROOT

plan=false mode=all
while [[ $# -gt 0 ]]; do
  case "$1" in
    --plan) plan=true; shift ;;
    --core) mode=core; shift ;;
    --for-tests) mode=tests; shift; break ;;  # the rest are pytest's
    *) echo "usage: launch/bootstrap.sh [--plan] [--core | --for-tests [PYTEST-ARGS...]]" >&2; exit 2 ;;
  esac
done
[[ $mode == tests && $# -eq 0 ]] && mode=all  # the whole suite needs everything
$plan || mkdir -p "$TAR2TF_CACHE"

marker_of() { sed -n 's/^# setup-for-marker: *\([A-Za-z_][A-Za-z0-9_]*\).*/\1/p' "$1" | head -n1; }

# The markers of the tests PYTEST-ARGS select, one a line, into $needs; collection takes a
# few seconds.  Without a venv (--plan on a fresh cache) they are not known: needs=UNKNOWN.
# If collection fails (a mistyped path, a module that does not import), no server is set
# up: pytest reports the error next, without first building servers for it.
needs=""
collect_needs() {
  local py out rc=0
  py=$(cat "$TAR2TF_CACHE/venv-current" 2>/dev/null) || py=""
  if [[ ! -x "$py" ]]; then
    needs=UNKNOWN; return
  fi
  out=$(mktemp)
  (cd "$ROOT" && TAR2TF_NEEDS_OUT="$out" PYTHONPATH="$ROOT/tests${PYTHONPATH:+:$PYTHONPATH}" \
     TF_CPP_MIN_LOG_LEVEL=3 "$py" -m pytest --collect-only -q -p support.setup_needs "$@" \
     >/dev/null 2>&1) || rc=$?
  needs=$(cat "$out")
  rm -f "$out"
  if [[ $rc -ne 0 && $rc -ne 5 ]]; then  # 5: no test selected
    echo "[bootstrap] collecting the selected tests failed (pytest exit $rc): no server is set up" >&2
  fi
}

collected=false
for step in "$ROOT"/launch/setup.d/*.sh; do
  name=$(basename "$step")
  why=""
  if [[ $mode == core && "$name" != 10-* ]]; then
    why="--core"
  elif [[ $mode == tests ]]; then
    marker=$(marker_of "$step")
    if [[ -n "$marker" ]]; then
      # the steps before the first marked one (the venv) are done by now: collect once
      $collected || { collect_needs "$@"; collected=true; }
      if [[ $needs == UNKNOWN ]]; then
        why="if a selected test is marked $marker: there is no venv yet to collect them with"
        $plan && { echo "maybe $name ($why)"; continue; }
        why=""  # a real run has built the venv by now; if not, the step runs to be safe
      elif ! grep -qx "$marker" <<<"$needs"; then
        why="no selected test is marked $marker"
      fi
    fi
  fi
  if $plan; then
    if [[ -n "$why" ]]; then echo "skip $name ($why)"; else echo "run $name"; fi
    continue
  fi
  if [[ -n "$why" ]]; then
    [[ $mode == tests ]] && echo "[bootstrap] $name: skipped, $why" >&2
    continue
  fi
  echo "[bootstrap] $name" >&2
  bash "$step" >&2
done
$plan || cat "$TAR2TF_CACHE/venv-current"
