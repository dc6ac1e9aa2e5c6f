#!/usr/bin/env bash
# The Apache Flink distribution's jars for a local standalone session cluster
# (launch/flink-cluster.sh), of the Flink minor version the job server of 50-flink.sh runs:
# PyPI's apache-flink-libraries sdist (launch/setup.d/flink_dist.py), extracted once into
#   $TAR2TF_CACHE/flink-dist/<version>/{lib/*.jar,bin/bash-java-utils.jar}
# Result: FLINK_DIST=<that directory> in $TAR2TF_CACHE/flink-dist.env (read by
# launch/flink/).  A later run with that directory in place does nothing.
# Optional component, like the job server: on failure it warns loudly and exits 0 (the
# cluster tests then skip, or fail under CI=true), and waits a day before trying again
# ($TAR2TF_CACHE/flink-dist.unavailable).
# Only tests marked with this marker need it: tests/run.sh with a selection skips it otherwise
# setup-for-marker: flink
set -uo pipefail
# optional on a developer's machine; in CI (CI=true) a step that cannot do its job fails
soft_exit() { if [[ "${CI:-}" == "true" ]]; then exit 1; fi; exit 0; }
: "${TAR2TF_CACHE:?}"
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
envfile="$TAR2TF_CACHE/flink-dist.env"
marker="$TAR2TF_CACHE/flink-dist.unavailable"
PY=$(cat "$TAR2TF_CACHE/venv-current" 2>/dev/null) || PY=""
[[ -x "$PY" ]] || { echo "WARNING [51-flink-dist]: no tar2tf venv yet" >&2; soft_exit; }
FLINK=$(sed -n 's/^FLINK_VERSION=//p' "$TAR2TF_CACHE/flink.env" 2>/dev/null)
if [[ -z "$FLINK" ]]; then
  echo "WARNING [51-flink-dist]: no Flink job server (50-flink.sh), so no Flink version to get" \
       "-- the Flink cluster tests will be SKIPPED" >&2
  soft_exit
fi
# already there for this Flink minor version?
if [[ -f "$envfile" ]]; then
  dist=$(sed -n 's/^FLINK_DIST=//p' "$envfile")
  if [[ "${dist##*/}" == "$FLINK".* && -s "$dist/bin/bash-java-utils.jar" ]]; then
    exit 0
  fi
fi
if [[ "${CI:-}" != "true" && -f "$marker" ]] && grep -qx "flink=$FLINK" "$marker" && [[ -n $(find "$marker" -mmin -1440) ]]; then
  echo "WARNING [51-flink-dist]: $(head -n1 "$marker") (cached; rm $marker to retry)" \
       "-- the Flink cluster tests will be SKIPPED" >&2
  soft_exit
fi
echo "getting the Flink $FLINK distribution's jars (PyPI apache-flink-libraries, ~230 MB)" >&2
if dist=$("$PY" "$ROOT/launch/setup.d/flink_dist.py" --cache "$TAR2TF_CACHE" --flink "$FLINK" 2>"$TAR2TF_CACHE/flink-dist.err"); then
  printf 'FLINK_DIST=%s\n' "$dist" > "$envfile.tmp" && mv "$envfile.tmp" "$envfile"
  rm -f "$marker"
  echo "Flink distribution: $dist" >&2
  exit 0
fi
why=$(tail -n1 "$TAR2TF_CACHE/flink-dist.err")
echo "WARNING [51-flink-dist]: $why -- the Flink cluster tests will be SKIPPED" >&2
printf '%s\nflink=%s\n' "$why" "$FLINK" > "$marker"
soft_exit
