"""A Flink standalone session cluster on this machine, for running tar2tf's Beam jobs on
separate worker processes.

The command line behind ``launch/flink-cluster.sh``:

    python -m launch.flink start  [--taskmanagers 2] [--rest-port 8081] ...
    python -m launch.flink status
    python -m launch.flink env     # FLINK_MASTER=... for launch/flink.sh
    python -m launch.flink add-taskmanager
    python -m launch.flink stop
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import urllib.error
from typing import Optional, Sequence

from launch.flink.cluster import (
    add_taskmanager,
    default_dist,
    default_state,
    env_lines,
    start,
    status,
    stop,
)
from launch.flink.procs import ClusterError


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="flink-cluster.sh", description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--state", default=default_state(), help="the cluster's directory (default: %(default)s)"
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("start", help="start the JobManager, the TaskManagers and the worker pool")
    s.add_argument("--taskmanagers", type=int, default=2)
    s.add_argument("--slots", type=int, default=1, help="task slots per TaskManager")
    s.add_argument("--rest-port", type=int, default=8081)
    s.add_argument("--rpc-port", type=int, default=6123)
    s.add_argument("--pool-port", type=int, default=50000)
    s.add_argument(
        "--no-pool", action="store_true", help="no Beam worker pool (DOCKER/PROCESS environments)"
    )
    s.add_argument("--tm-memory", default="1280m", help="each TaskManager's process size")
    s.add_argument(
        "--pool-python",
        help="the python of the worker pool and its SDK workers "
        "(default: this one, the tar2tf venv's)",
    )
    s.add_argument(
        "--pool-env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="more environment for the pool and its SDK workers (repeatable)",
    )
    s.add_argument(
        "--dist",
        default=default_dist(),
        help="the Flink distribution (lib/, bin/bash-java-utils.jar)",
    )
    s.add_argument("--timeout", type=float, default=120)
    others = [
        sub.add_parser("stop", help="stop every process of the cluster, by PID"),
        sub.add_parser("status", help="the REST overview and the processes"),
        sub.add_parser(
            "env", help="FLINK_MASTER=... ENVIRONMENT_TYPE=... lines for launch/flink.sh"
        ),
        sub.add_parser(
            "add-taskmanager", help="start one more TaskManager (e.g. to replace a lost one)"
        ),
    ]
    for p in [s, *others]:  # --state also after the command
        p.add_argument("--state", dest="sub_state", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    state = os.path.abspath(a.sub_state or a.state)
    try:
        if a.cmd == "start":
            st = start(
                state,
                a.dist,
                a.taskmanagers,
                a.rest_port,
                a.rpc_port,
                None if a.no_pool else a.pool_port,
                a.slots,
                a.tm_memory,
                pool_python=a.pool_python,
                pool_extra_env=dict(kv.split("=", 1) for kv in a.pool_env),
                timeout=a.timeout,
            )
            print(
                f"Flink cluster: web UI http://localhost:{a.rest_port}, {a.taskmanagers} TaskManager(s)"
                + (f", Beam worker pool localhost:{a.pool_port}" if not a.no_pool else "")
                + f"; logs {st['logs']}",
                file=sys.stderr,
            )
            print("\n".join(env_lines(state)))
        elif a.cmd == "stop":
            ran = stop(state)
            print(f"stopped: {', '.join(ran) if ran else 'nothing was running'}", file=sys.stderr)
        elif a.cmd == "status":
            s = status(state)
            print(json.dumps(s, indent=1))
            return 0 if s["overview"] is not None else 1
        elif a.cmd == "env":
            print("\n".join(env_lines(state)))
        elif a.cmd == "add-taskmanager":
            print(add_taskmanager(state))
    except ClusterError as e:
        print(f"flink-cluster: {e}", file=sys.stderr)
        return 2
    except (OSError, urllib.error.URLError, subprocess.SubprocessError) as e:
        print(f"flink-cluster: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
