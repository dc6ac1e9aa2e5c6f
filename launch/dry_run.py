"""Dry run of a ``tar2tf convert`` command line: what Beam would be given, and whether
the runner options make sense -- without starting a job.

``launch/flink.sh --dry-run ...`` and ``launch/dataflow.sh --dry-run ...`` call this with
the exact arguments they would pass to ``tar2tf convert``.  It splits the tar2tf options
from the Beam ones the way the CLI does, parses the Beam ones with Beam's own
``PipelineOptions`` (so a typo or an unknown ``--flink_version`` fails here, as in the
CLI: :func:`launch.runner_args.check_beam_args`), prints which driver the CLI would run (``driver``:
``in-process`` with no Beam option, else ``beam``) and the relevant option views as
JSON, and lists problems (exit 2 if any): missing Dataflow project/region/temp location, a
``--setup_file`` that is not a ``setup.py``, local paths a remote worker cannot see, a
missing Flink job server jar, LOOPBACK with a remote cluster.

Usage: ``python -m launch.dry_run convert SOURCE... --output OUT [options] [beam options]``
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Dict, List, Optional

from launch.args import UsageError, known_args
from launch.cli import build_parser, check_runner_args
from transforms.stores import split_url


def _remote_problem(kind: str, url: str) -> Optional[str]:
    if split_url(url)[0] == "":
        return f"{kind} {url!r} is a local path: remote workers cannot see this machine's disk (use gs:// or ais://)"
    return None


def describe(argv: List[str]) -> Dict[str, Any]:
    from apache_beam.options import pipeline_options as po

    from pipelines.beam import options as opts

    parser = build_parser()
    args, extra = known_args(parser, argv)
    check_runner_args(extra, parser.subcommands[args.command]._option_string_actions)
    # what the CLI would run (launch/cmd_convert.py, launch/cmd_pcr.py): with no Beam
    # option, the in-process driver
    in_process = opts.in_process(extra, bool(getattr(args, "shuffle", False)))
    beam_args = [] if in_process else opts.effective_args(extra)
    options = po.PipelineOptions(beam_args)
    runner = opts.IN_PROCESS if not beam_args else opts.runner_name(beam_args)
    gco = options.view_as(po.GoogleCloudOptions)
    setup = options.view_as(po.SetupOptions)
    worker = options.view_as(po.WorkerOptions)
    portable = options.view_as(po.PortableOptions)
    flink = options.view_as(po.FlinkRunnerOptions)
    out: Dict[str, Any] = {
        "command": args.command,
        "sources": getattr(args, "sources", None),
        "output": getattr(args, "output", None),
        "base": getattr(args, "base", None),
        "work_dir": getattr(args, "work_dir", None),
        "driver": "in-process" if in_process else "beam",
        "beam_args": beam_args,
        "runner": runner,
        "google_cloud": {
            "project": gco.project,
            "region": gco.region,
            "temp_location": gco.temp_location,
            "staging_location": gco.staging_location,
            "job_name": gco.job_name,
        },
        "setup": {
            "setup_file": setup.setup_file,
            "requirements_file": setup.requirements_file,
            "extra_packages": setup.extra_packages,
            "sdk_location": setup.sdk_location,
        },
        "worker": {
            "sdk_container_image": worker.sdk_container_image,
            "num_workers": worker.num_workers,
            "max_num_workers": worker.max_num_workers,
            "machine_type": worker.machine_type,
        },
        "portable": {
            "environment_type": portable.environment_type,
            "environment_config": portable.environment_config,
            "job_endpoint": portable.job_endpoint,
        },
        "flink": {
            "flink_master": flink.flink_master,
            "flink_version": flink.flink_version,
            "flink_job_server_jar": flink.flink_job_server_jar,
            "parallelism": flink.parallelism,
        },
    }
    out["problems"] = problems(out)
    return out


def problems(d: Dict[str, Any]) -> List[str]:
    found: List[str] = []
    runner, gc, setup = d["runner"], d["google_cloud"], d["setup"]
    remote_workers = runner == "DataflowRunner" or (
        runner == "FlinkRunner" and d["flink"]["flink_master"] not in ("[local]", "[auto]", None)
    )
    if runner == "DataflowRunner":
        for k in ("project", "region", "temp_location"):
            if not gc[k]:
                found.append(f"Dataflow needs --{k}")
        if gc["temp_location"] and not gc["temp_location"].startswith("gs://"):
            found.append(f"--temp_location must be a gs:// path, not {gc['temp_location']!r}")
        if not (
            setup["setup_file"] or setup["extra_packages"] or d["worker"]["sdk_container_image"]
        ):
            found.append(
                "workers would not get tar2tf: pass --setup_file=./setup.py, --extra_package "
                "or --sdk_container_image"
            )
    if setup["setup_file"]:
        if os.path.basename(setup["setup_file"]) != "setup.py":
            found.append(f"--setup_file must name a setup.py, not {setup['setup_file']!r}")
        elif not os.path.isfile(setup["setup_file"]):
            found.append(f"--setup_file {setup['setup_file']!r} does not exist")
    if setup["requirements_file"] and not os.path.isfile(setup["requirements_file"]):
        found.append(f"--requirements_file {setup['requirements_file']!r} does not exist")
    for pkg in setup["extra_packages"] or []:
        if split_url(pkg)[0] == "" and not os.path.isfile(pkg):
            found.append(
                f"--extra_package {pkg!r} does not exist (build it first: python -m build --sdist)"
            )
    if runner == "FlinkRunner":
        jar = d["flink"]["flink_job_server_jar"]
        if not jar:
            found.append(
                "no --flink_job_server_jar: Beam would download the job server at run time "
                "(run launch/setup.d/50-flink.sh)"
            )
        elif not jar.startswith(("http://", "https://")) and not os.path.isfile(jar):
            found.append(f"--flink_job_server_jar {jar!r} does not exist")
        elif f"flink-{d['flink']['flink_version']}-job-server" not in os.path.basename(jar):
            found.append(
                f"--flink_version {d['flink']['flink_version']} does not match the jar {jar!r}"
            )
        if remote_workers and (d["portable"]["environment_type"] or "").upper() == "LOOPBACK":
            found.append(
                "LOOPBACK runs the Python workers in this process: a remote Flink cluster needs "
                "--environment_type=DOCKER, PROCESS or EXTERNAL"
            )
    if remote_workers and d["output"]:
        # a relative source under a remote --base is remote (as sources.resolve joins them)
        base = d.get("base")
        sources = [
            s if not base or "://" in s or s.startswith("/") else f"{base.rstrip('/')}/{s}"
            for s in d["sources"] or []
        ]
        checks = [("--output", d["output"])] + [("source", s) for s in sources]
        if d.get("work_dir"):  # the workers write their pieces there
            checks.append(("--work-dir", d["work_dir"]))
        for msg in (_remote_problem(what, where) for what, where in checks):
            if msg:
                found.append(msg)
    return found


def main(argv: Optional[List[str]] = None) -> int:
    try:
        d = describe(list(sys.argv[1:] if argv is None else argv))
    except UsageError as e:  # argparse, an unknown flag, a bad Beam option value
        print(e, file=sys.stderr)
        return 2
    except SystemExit as e:  # Beam option errors already printed their message
        return int(e.code or 2)
    json.dump(d, sys.stdout, indent=1, sort_keys=True)
    print()
    for p in d["problems"]:
        print(f"problem: {p}", file=sys.stderr)
    return 2 if d["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
