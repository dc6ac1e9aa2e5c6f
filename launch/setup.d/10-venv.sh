#!/usr/bin/env bash
# A Python virtualenv with tar2tf and its test extras, keyed by a hash of pyproject.toml,
# so a dependency change builds a fresh one and reruns reuse it.
set -euo pipefail
: "${TAR2TF_CACHE:?}" "${TAR2TF_ROOT:?}"
PY=${PYTHON:-python3}
# the key covers the dependency lists and the pinned versions only, so editing other
# metadata reuses the venv
pins="$TAR2TF_ROOT/launch/constraints.txt"
# the pins were resolved on Python 3.11 (the machine the tests run on); another Python
# resolves within pyproject.toml's ranges instead
if [[ $($PY -c 'import sys; print("%d.%d" % sys.version_info[:2])') != 3.11 ]]; then
  pins=/dev/null
fi
key=$( (sed -n '/^dependencies = \[/,/^\[project.scripts\]/p' "$TAR2TF_ROOT/pyproject.toml"
        grep -v '^#' "$pins"
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
  if ! { "$venv/bin/pip" install --upgrade pip && "$venv/bin/pip" install -c "$pins" -e "$TAR2TF_ROOT[test,bench]"; } >"$log" 2>&1; then
    tail -n 30 "$log" >&2
    exit 1
  fi
  touch "$venv/.complete"
else
  # the source tree may have moved (fresh clone): re-point the editable install cheaply
  "$venv/bin/pip" install -q --no-deps -e "$TAR2TF_ROOT" >"$log" 2>&1 || { tail -n 30 "$log" >&2; exit 1; }
fi
echo "$venv/bin/python" > "$TAR2TF_CACHE/venv-current"
