#!/usr/bin/env bash
# This checkout's venv, the one the set-up builds for it under ${TAR2TF_CACHE:-~/.cache/tar2tf}:
#   source "$(bash launch/venv.sh)"    activate it (set up first if it is missing, or if
#                                      its editable install points at another checkout)
#   bash launch/venv.sh --python       print its python instead of its activate script
#   bash launch/venv.sh --path         print its directory only: no set-up, exit 1 if absent
# The venv is found by the rule that builds it (launch/setup.d/venv-key.bash), not from
# $TAR2TF_CACHE/venv-current, which names whichever checkout was set up last.
set -euo pipefail
ROOT=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)
export TAR2TF_CACHE=${TAR2TF_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tar2tf}
export TAR2TF_ROOT=$ROOT
# shellcheck source=launch/setup.d/venv-key.bash
source "$ROOT/launch/setup.d/venv-key.bash"
venv_locate
mode=${1:-}
case "$mode" in
  ""|--python|--path) ;;
  *) echo "usage: launch/venv.sh [--python|--path]" >&2; exit 2 ;;
esac

# the venv is complete and tar2tf in it is this checkout's
ours() {
  [[ -x "$VENV_DIR/bin/python" && -f "$VENV_DIR/.complete" ]] || return 1
  # -I: not the working directory's tar2tf.egg-info, only what the venv has installed
  "$VENV_DIR/bin/python" -I - "$ROOT" <<'PY' 2>/dev/null
import json, os, sys, urllib.parse
from importlib import metadata

url = json.loads(metadata.distribution("tar2tf").read_text("direct_url.json") or "{}").get("url", "")
here = urllib.parse.unquote(urllib.parse.urlparse(url).path)
sys.exit(0 if url and os.path.realpath(here) == os.path.realpath(sys.argv[1]) else 1)
PY
}

if [[ "$mode" == --path ]]; then
  echo "$VENV_DIR"
  [[ -x "$VENV_DIR/bin/python" && -f "$VENV_DIR/.complete" ]]
  exit
fi
if ! ours; then
  "$ROOT/launch/bootstrap.sh" --core >&2
fi
if [[ "$mode" == --python ]]; then
  echo "$VENV_DIR/bin/python"
else
  echo "$VENV_DIR/bin/activate"
fi
