#!/usr/bin/env bash
# A Python virtualenv with tar2tf and its test extras, keyed by a hash of pyproject.toml's
# dependency lists (launch/setup.d/venv-key.bash), so a dependency change builds a fresh
# one and reruns reuse it.
set -euo pipefail
: "${TAR2TF_CACHE:?}" "${TAR2TF_ROOT:?}"
PY=${PYTHON:-python3}
# shellcheck source=launch/setup.d/venv-key.bash
source "$(dirname "${BASH_SOURCE[0]}")/venv-key.bash"
venv_locate
pins=$VENV_PINS
log="$TAR2TF_CACHE/pip-install.log"
venv=$VENV_DIR

# pip, quiet in its log, with a line every 10 s ($TAR2TF_PROGRESS_EVERY) on stderr saying
# how far it got (launch/setup.d/venv-progress.bash): a first install fetches and unpacks
# about 3.5 GB for a minute or two, and silence looks like a hang
# shellcheck source=launch/setup.d/venv-progress.bash
source "$(dirname "${BASH_SOURCE[0]}")/venv-progress.bash"
started=$SECONDS
pip_with_progress() {
  local ticker rc=0 first stamp
  first=$(($(wc -l <"$log") + 1))  # this call's lines only: an earlier pip's do not count
  stamp=$(mktemp "$TAR2TF_CACHE/pip-start.XXXXXX")  # what pip installs is newer than this
  (
    # the sleep is killed with the ticker and holds none of the caller's pipes open
    trap 'kill "$nap" 2>/dev/null; exit 0' TERM
    while :; do
      sleep "${TAR2TF_PROGRESS_EVERY:-10}" </dev/null >/dev/null 2>&1 &
      nap=$!
      wait "$nap"
      echo "[venv] $((SECONDS - started)) s: $(venv_progress "$log" "$first" "$stamp" "$venv")" >&2
    done
  ) &
  ticker=$!
  "$@" >>"$log" 2>&1 || rc=$?
  kill "$ticker" 2>/dev/null || true
  wait "$ticker" 2>/dev/null || true
  rm -f "$stamp"
  return $rc
}

# one builder at a time (parallel test runs, a demo started during the tests)
exec 9>"$TAR2TF_CACHE/venv.lock"
flock 9
if [[ ! -x "$venv/bin/python" || ! -f "$venv/.complete" ]]; then
  rm -rf "$venv"
  $PY -m venv "$venv"
  echo "installing dependencies into $venv (about 3.5 GB, once; log: $log)" >&2
  : > "$log"
  if ! { pip_with_progress "$venv/bin/pip" install --upgrade pip &&
         pip_with_progress "$venv/bin/pip" install -c "$pins" -e "$TAR2TF_ROOT[test,bench]"; }; then
    tail -n 30 "$log" >&2
    exit 1
  fi
  echo "[venv] done: $(grep -c '^Collecting ' "$log" || true) packages" >&2
  touch "$venv/.complete"
else
  # the source tree may have moved (fresh clone): re-point the editable install cheaply
  "$venv/bin/pip" install -q --no-deps -e "$TAR2TF_ROOT" >"$log" 2>&1 || { tail -n 30 "$log" >&2; exit 1; }
fi
echo "$venv/bin/python" > "$TAR2TF_CACHE/venv-current"
