#!/usr/bin/env bash
# A Python virtualenv with tar2tf and its test extras, keyed by a hash of pyproject.toml,
# so a dependency change builds a fresh one and reruns reuse it.
set -euo pipefail
: "${TAR2TF_CACHE:?}" "${TAR2TF_ROOT:?}"
PY=${PYTHON:-python3}
# the key covers the dependency lists only, so editing other metadata reuses the venv
key=$( (sed -n '/^dependencies = \[/,/^\[project.scripts\]/p' "$TAR2TF_ROOT/pyproject.toml"
        $PY -c 'import sys; print(sys.version)') | sha256sum | cut -c1-12)
log="$TAR2TF_CACHE/pip-install.log"
venv="$TAR2TF_CACHE/venv-$key"
# one builder at a time (parallel test runs, a demo started during the tests)
exec 9>"$TAR2TF_CACHE/venv.lock"
flock 9
if [[ ! -x "$venv/bin/python" || ! -f "$venv/.complete" ]]; then
  rm -rf "$venv"
  $PY -m venv "$venv"
  echo "installing dependencies into $venv (log: $log)" >&2
  if ! { "$venv/bin/pip" install --upgrade pip && "$venv/bin/pip" install -e "$TAR2TF_ROOT[test,bench]"; } >"$log" 2>&1; then
    tail -n 30 "$log" >&2
    exit 1
  fi
  touch "$venv/.complete"
else
  # the source tree may have moved (fresh clone): re-point the editable install cheaply
  "$venv/bin/pip" install -q --no-deps -e "$TAR2TF_ROOT" >"$log" 2>&1 || { tail -n 30 "$log" >&2; exit 1; }
fi
echo "$venv/bin/python" > "$TAR2TF_CACHE/venv-current"
