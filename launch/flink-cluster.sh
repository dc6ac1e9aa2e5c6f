#!/usr/bin/env bash
# A Flink standalone session cluster on this machine (loopback only): one JobManager, two
# TaskManagers (separate JVMs) and Beam's Python worker pool, for running tar2tf on separate
# worker processes.  See docs/runners.md and launch/flink/.
#
#   launch/flink-cluster.sh start            # prints FLINK_MASTER=... lines for launch/flink.sh
#   env $(launch/flink-cluster.sh env) launch/flink.sh 'data/train-{0000..0147}.tar' \
#       -o out/train-{}.record --parallelism=2
#   launch/flink-cluster.sh status           # Flink's REST overview and the PIDs
#   launch/flink-cluster.sh stop             # ends every process it started, by PID
#
# Options go after the command (start --help lists them: ports, TaskManager count and memory).
# The Flink jars come from launch/setup.d/51-flink-dist.sh (run by launch/bootstrap.sh).
# Python: $TAR2TF_PYTHON, else the bootstrap venv, which the worker pool also runs on.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export TAR2TF_CACHE=${TAR2TF_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tar2tf}
PY=${TAR2TF_PYTHON:-$("$ROOT/launch/bootstrap.sh" --core | tail -n 1)}
cd "$ROOT"
exec "$PY" -m launch.flink "$@"
