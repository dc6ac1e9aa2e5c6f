#!/usr/bin/env bash
# A Python virtualenv with tar2tf and its test extras, keyed by a hash of pyproject.toml,
# so a dependency change builds a fresh one and reruns reuse it.
set -euo pipefail
: "${TAR2TF_CACHE:?}" "${TAR2TF_ROOT:?}"
PY=${PYTHON:-python3}
key=$( (cat "$TAR2TF_ROOT/pyproject.toml"; $PY -c 'import sys; print(sys.version)') | sha256sum | cut -c1-12)
venv="$TAR2TF_CACHE/venv-$key"
if [[ ! -x "$venv/bin/python" || ! -f "$venv/.complete" ]]; then
  rm -rf "$venv"
  $PY -m venv "$venv"
  "$venv/bin/pip" install -q --upgrade pip
  "$venv/bin/pip" install -q -e "$TAR2TF_ROOT[test]"
  touch "$venv/.complete"
else
  # the source tree may have moved (fresh clone): re-point the editable install cheaply
  "$venv/bin/pip" install -q --no-deps -e "$TAR2TF_ROOT" >/dev/null
fi
echo "$venv/bin/python" > "$TAR2TF_CACHE/venv-current"
