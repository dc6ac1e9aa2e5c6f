#!/usr/bin/env bash
# The Beam Flink job server jar, so that FlinkRunner never downloads anything at run time:
#   org.apache.beam:beam-runners-flink-<flink>-job-server:<beam>   (mvn dependency:get)
# <beam> is the apache-beam installed in the venv; <flink> is tried from the newest Flink
# that Beam publishes a job server for (FlinkRunnerOptions.PUBLISHED_FLINK_VERSIONS) down.
# Where Maven serves no such jar, the same server is assembled from its parts:
# beam-runners-flink-<flink>:<beam'> and its dependencies (the newest <beam'> <= <beam> that
# resolves), started through a manifest-only jar (launch/setup.d/flink_job_server.py), with an
# SLF4J binding so that the server logs (WARN and above; docs/runners.md).
# $TAR2TF_FLINK_JOB_SERVER_JAR (+ $TAR2TF_FLINK_VERSION) may name a jar you already have.
# Result, read by launch/flink.sh and tests/cluster/test_flink.py:
#   $TAR2TF_CACHE/flink.env  with FLINK_VERSION=, FLINK_JOB_SERVER_JAR=, BEAM_VERSION=
# Optional component: on failure it warns loudly and exits 0 (the Flink test then skips),
# and remembers the failure for a day ($TAR2TF_CACHE/flink.unavailable) so reruns stay fast.
# Only tests marked with this marker need it: tests/run.sh with a selection skips it otherwise
# setup-for-marker: flink
set -uo pipefail
# optional on a developer's machine; in CI (CI=true) a step that cannot do its job fails
soft_exit() { if [[ "${CI:-}" == "true" ]]; then exit 1; fi; exit 0; }
: "${TAR2TF_CACHE:?}"
envfile="$TAR2TF_CACHE/flink.env"
marker="$TAR2TF_CACHE/flink.unavailable"
# what a remembered failure covers: a marker written before the assembly step existed is stale
TRIED="tried=job-server-jar,assembled"
warn() {  # message; remembered with the Beam version it was for
  echo "WARNING [50-flink]: $* -- the Flink runner test will be SKIPPED" >&2
  printf '%s\nbeam=%s\n%s\n' "$*" "${BEAM:-}" "$TRIED" > "$marker"
  soft_exit
}
PY=$(cat "$TAR2TF_CACHE/venv-current" 2>/dev/null) || PY=""
[[ -x "$PY" ]] || { echo "WARNING [50-flink]: no tar2tf venv yet" >&2; soft_exit; }
# the Beam version from its dist-info (cheap); Flink versions from Beam itself (slower)
BEAM=$(ls -d "$(dirname "$PY")"/../lib/python3*/site-packages/apache_beam-*.dist-info 2>/dev/null | head -n1 \
       | sed 's/.*apache_beam-\(.*\)\.dist-info/\1/')
[[ -n "$BEAM" ]] || { echo "WARNING [50-flink]: apache-beam is not installed in the venv" >&2; soft_exit; }
flink_versions() {
  "$PY" -c 'from apache_beam.options.pipeline_options import FlinkRunnerOptions as F
print(*reversed(F.PUBLISHED_FLINK_VERSIONS))' 2>/dev/null
}

write_env() {  # flink version, jar
  printf 'FLINK_VERSION=%s\nFLINK_JOB_SERVER_JAR=%s\nBEAM_VERSION=%s\n' "$1" "$2" "$BEAM" > "$envfile.tmp"
  mv "$envfile.tmp" "$envfile"
  rm -f "$marker"
}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

if [[ -n "${TAR2TF_FLINK_JOB_SERVER_JAR:-}" ]]; then
  [[ -s "$TAR2TF_FLINK_JOB_SERVER_JAR" ]] || warn "TAR2TF_FLINK_JOB_SERVER_JAR=$TAR2TF_FLINK_JOB_SERVER_JAR does not exist"
  # the Flink version: $TAR2TF_FLINK_VERSION, else the jar's Maven name
  # (beam-runners-flink-<flink>-job-server-<beam>.jar), else the newest Beam publishes
  v=${TAR2TF_FLINK_VERSION:-}
  name=${TAR2TF_FLINK_JOB_SERVER_JAR##*/}
  if [[ -z "$v" && "$name" =~ ^beam-runners-flink-([0-9.]+)-job-server ]]; then
    v=${BASH_REMATCH[1]}
  fi
  if [[ -z "$v" ]]; then
    FLINKS=$(flink_versions)
    v=${FLINKS%% *}
    echo "WARNING [50-flink]: cannot tell the Flink version of $name; assuming $v (set TAR2TF_FLINK_VERSION)" >&2
  fi
  write_env "$v" "$TAR2TF_FLINK_JOB_SERVER_JAR"
  exit 0
fi
# already set up for this Beam (a fetched or an assembled jar)?
if [[ -f "$envfile" ]] && grep -qx "BEAM_VERSION=$BEAM" "$envfile"; then
  jar=$(sed -n 's/^FLINK_JOB_SERVER_JAR=//p' "$envfile")
  if [[ -s "$jar" ]]; then
    # an assembled server is brought up to date in place (one assembled before it had a
    # logging binding gets one: a small download, not the whole server again); if that
    # fails the server still runs, only without logs, and the next run retries
    if [[ "$jar" == "$TAR2TF_CACHE"/flink-job-server/*-assembled.jar ]] &&
       ! "$PY" "$ROOT/launch/setup.d/flink_job_server.py" --cache "$TAR2TF_CACHE" --update "$jar"; then
      echo "WARNING [50-flink]: could not update $jar (log: $TAR2TF_CACHE/mvn-flink-assemble.log)" >&2
    fi
    exit 0
  fi
fi
# already fetched? the newest Flink first
for jar in $(ls "$TAR2TF_CACHE"/jars/beam-runners-flink-*-job-server-"$BEAM".jar 2>/dev/null | sort -V -r); do
  if [[ -s "$jar" ]]; then
    v=${jar##*/beam-runners-flink-}; v=${v%%-job-server-*}
    [[ -f "$envfile" ]] && grep -qx "FLINK_JOB_SERVER_JAR=$jar" "$envfile" || write_env "$v" "$jar"
    exit 0
  fi
done
# a failure less than a day old for this Beam version: do not ask Maven again
if [[ "${CI:-}" != "true" && -f "$marker" ]] && grep -qx "beam=$BEAM" "$marker" && grep -qx "$TRIED" "$marker" && [[ -n $(find "$marker" -mmin -1440) ]]; then
  echo "WARNING [50-flink]: $(head -n1 "$marker") (cached; rm $marker to retry) -- the Flink runner test will be SKIPPED" >&2
  soft_exit
fi
FLINKS=$(flink_versions)
[[ -n "$FLINKS" ]] || warn "cannot read the Flink versions of apache-beam $BEAM"
command -v java >/dev/null || warn "java not found (apt-get install openjdk-17-jre-headless)"
command -v mvn >/dev/null || warn "mvn not found (apt-get install maven)"
mkdir -p "$TAR2TF_CACHE/jars"
repo="$TAR2TF_CACHE/m2"
log="$TAR2TF_CACHE/mvn-flink.log"
: > "$log"
# Where Maven serves no job server jar for this Beam version, the assembly below is the
# normal path: neither the miss nor the assembly is worded as a failure
echo "[50-flink] the Flink job server for Beam $BEAM: looking for a published jar on Maven Central (once; log: $log)" >&2
for v in $FLINKS; do
  artifact="beam-runners-flink-$v-job-server"
  if mvn -q -B -U -Dmaven.repo.local="$repo" dependency:get -Dtransitive=false \
       -Dartifact="org.apache.beam:$artifact:$BEAM" >>"$log" 2>&1; then
    src="$repo/org/apache/beam/$artifact/$BEAM/$artifact-$BEAM.jar"
    jar="$TAR2TF_CACHE/jars/$artifact-$BEAM.jar"
    if [[ -s "$src" ]] && mv "$src" "$jar.tmp" && mv "$jar.tmp" "$jar"; then
      rm -rf "$repo/org/apache/beam/$artifact"
      write_env "$v" "$jar"
      exit 0
    fi
  fi
done
echo "[50-flink] no published jar for Beam $BEAM (Flink $(echo $FLINKS | tr ' ' ,)): assembling the job server from its Maven parts instead (once, a few minutes; log: $TAR2TF_CACHE/mvn-flink-assemble.log)" >&2
# shellcheck disable=SC2086
if got=$("$PY" "$ROOT/launch/setup.d/flink_job_server.py" --cache "$TAR2TF_CACHE" --beam "$BEAM" --flink $FLINKS); then
  read -r v jar <<<"$got"
  write_env "$v" "$jar"
  echo "[50-flink] Flink $v job server assembled: $jar" >&2
  exit 0
fi
warn "no Flink job server: no org.apache.beam:beam-runners-flink-<flink>-job-server:$BEAM jar, and none could be assembled from beam-runners-flink-<flink> (logs: $log, $TAR2TF_CACHE/mvn-flink-assemble.log; or set TAR2TF_FLINK_JOB_SERVER_JAR)"
