#!/usr/bin/env bash
# Run `tar2tf convert` (or `tar2tf pcr`) on Apache Flink through Beam's portable Flink
# runner.  See docs/runners.md.
#
#   launch/flink.sh 'data/train-{0000..0147}.tar' --output out/train-{}.record --max-shard-size 100MB
#   launch/flink.sh pcr 'data/train-{0000..0147}.tar' --output out/pcr --images-per-record 1024
#
# Everything after the script name (and an optional first `convert` or `pcr`) goes to
# `tar2tf convert` (`tar2tf pcr`).  Added here:
#   --runner=FlinkRunner --flink_master=$FLINK_MASTER --flink_version=<v>
#   --flink_job_server_jar=<jar> --environment_type=$ENVIRONMENT_TYPE [--environment_config=...]
# The job server jar and its Flink version come from launch/setup.d/50-flink.sh
# ($TAR2TF_CACHE/flink.env), so nothing is downloaded at run time; FLINK_JOB_SERVER_JAR and
# FLINK_VERSION override them.  Java 11+ must be on PATH.
#
# Defaults: an embedded Flink mini-cluster in the job server's JVM (FLINK_MASTER=[local])
# with the Python workers inside this process (ENVIRONMENT_TYPE=LOOPBACK), which is what
# the tests use.  A real cluster (Flink's REST port, same minor version as the jar):
#   FLINK_MASTER=flink-jobmanager:8081 ENVIRONMENT_TYPE=DOCKER \
#   ENVIRONMENT_CONFIG=my-registry/tar2tf-worker:latest launch/flink.sh ... --parallelism=16
# where the image is FROM apache/beam_python3.11_sdk:<beam version> plus `pip install .`;
# or ENVIRONMENT_TYPE=EXTERNAL ENVIRONMENT_CONFIG=localhost:50000 with a Beam worker pool
# (python -m apache_beam.runners.worker.worker_pool_main --service_port=50000) beside each
# task manager.  Input and output must then be on storage the task managers reach
# (gs://, ais://, a shared mount).  Add --flink_submit_uber_jar when the job server cannot
# upload artifacts to the cluster by itself.
# The job server's log (Java; Beam's Python runner logs its lines, shown on stderr): WARN
# and above, less four warnings that every embedded run prints and that mean nothing (set at
# ERROR below); FLINK_LOG_LEVEL=info (or debug, trace, warn, error, off) sets one level for all.
# --dry-run: print the parsed options and problems (exit 0 = fine, 2 = problems); no job runs.
# Python: $TAR2TF_PYTHON, else the bootstrap venv (launch/bootstrap.sh --core).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export TAR2TF_CACHE=${TAR2TF_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tar2tf}
# shellcheck source=launch/script_flags.sh
source "$ROOT/launch/script_flags.sh"
script_flags "${BASH_SOURCE[0]}" "$@"
set -- ${rest[@]+"${rest[@]}"}
if [[ -f "$TAR2TF_CACHE/flink.env" ]]; then
  # shellcheck disable=SC1091
  source <(grep -E '^(FLINK_VERSION|FLINK_JOB_SERVER_JAR|BEAM_VERSION)=' "$TAR2TF_CACHE/flink.env" | sed 's/^/CACHED_/')
fi
FLINK_VERSION=${FLINK_VERSION:-${CACHED_FLINK_VERSION:-}}
FLINK_JOB_SERVER_JAR=${FLINK_JOB_SERVER_JAR:-${CACHED_FLINK_JOB_SERVER_JAR:-}}
FLINK_MASTER=${FLINK_MASTER:-[local]}
ENVIRONMENT_TYPE=${ENVIRONMENT_TYPE:-LOOPBACK}
if [[ -z "$FLINK_JOB_SERVER_JAR" || -z "$FLINK_VERSION" ]]; then
  msg="no Flink job server jar: run launch/setup.d/50-flink.sh (via launch/bootstrap.sh) or set FLINK_JOB_SERVER_JAR and FLINK_VERSION"
  [[ -f "$TAR2TF_CACHE/flink.unavailable" ]] && msg+=" (last attempt: $(head -n1 "$TAR2TF_CACHE/flink.unavailable"))"
  echo "launch/flink.sh: $msg" >&2
  exit 2
fi
args=(--runner=FlinkRunner "--flink_master=$FLINK_MASTER" "--flink_version=$FLINK_VERSION"
      "--flink_job_server_jar=$FLINK_JOB_SERVER_JAR" "--environment_type=$ENVIRONMENT_TYPE"
      "--job_server_jvm_properties=-Dorg.slf4j.simpleLogger.defaultLogLevel=${FLINK_LOG_LEVEL:-warn}")
if [[ -z "${FLINK_LOG_LEVEL:-}" ]]; then
  # the LOOPBACK workers' servers closed twice at the end (a stack trace per stage); no
  # log.file for the web UI; no Kerberos tokens; operator names longer than Flink's metrics allow
  for quiet in org.apache.beam.runners.fnexecution.control.DefaultJobBundleFactory \
               org.apache.flink.runtime.webmonitor.WebMonitorUtils \
               org.apache.flink.runtime.security.token.DefaultDelegationTokenManager \
               org.apache.flink.metrics.MetricGroup; do
    args+=("--job_server_jvm_properties=-Dorg.slf4j.simpleLogger.log.$quiet=error")
  done
fi
[[ -n "${ENVIRONMENT_CONFIG:-}" ]] && args+=("--environment_config=$ENVIRONMENT_CONFIG")
PY=${TAR2TF_PYTHON:-$("$ROOT/launch/bootstrap.sh" --core | tail -n 1)}
export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-2}
if ((dry)); then
  exec "$PY" -m launch.dry_run "$cmd" "$@" "${args[@]}"
fi
command -v java >/dev/null || { echo "launch/flink.sh: java is not on PATH (Java 11+ needed)" >&2; exit 2; }
exec "$PY" -m launch.cli "$cmd" "$@" "${args[@]}"
