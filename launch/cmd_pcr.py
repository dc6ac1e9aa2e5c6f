"""``tar2tf pcr SOURCE... --output DIR``: images to Progressive Compressed Records (Beam).

SOURCE is an ImageFolder directory (``root/<class>/<image>``, labels = positions of the
sorted class names) or tar shard templates (local, ``ais://``, ``gs://``, ``s3://``,
``https://``; label = the
integer in ``--label-field``, default ``cls``).  JPEGs are made progressive losslessly
with jpegtran; other images are encoded once at ``--quality``.  ``--scans FILE`` gives
jpegtran a custom scan script for 3-component images (its text travels with the job, so
remote workers need no copy; a bad script is a usage error).  With no runner flag (or
``--runner inprocess``) the job runs in this process, on the in-process driver's threads
(``pipelines.inprocess.driver``: jpegtran subprocesses do the work, which threads overlap
as well as worker processes do); other ``--flags`` make it a Beam job if they
are Beam pipeline options (``--runner beam``: the local runner's worker processes;
``--runner FlinkRunner`` ...), else they are a usage error.  See docs/pcr.md.
"""

from __future__ import annotations

import json
import sys

from launch.args import add_runner_arg, int_in
from launch.progress_args import add_progress_args, progress_options
from launch.store_args import add_store_args, store_config

# what ``tar2tf pcr --help`` says (the module docstring names the code for developers)
DESCRIPTION = """\
tar2tf pcr SOURCE... --output DIR: images to Progressive Compressed Records.

SOURCE is an ImageFolder directory (root/<class>/<image>, labels = positions of the sorted
class names) or tar shard templates (local, ais://, gs://, s3://, https://; label = the
integer in --label-field, default cls).  JPEGs are made progressive losslessly with
jpegtran; other images are encoded once at --quality.  --scans FILE gives jpegtran a
custom scan script for 3-component images (a bad script is a usage error).  With no
runner flag (or --runner inprocess) the job runs in this process, on threads (one per core);
--runner beam uses Beam's local runner's worker processes, --runner FlinkRunner ... another Beam
runner, and other flags must be Beam pipeline options.  See docs/pcr.md.
"""


def register(sub) -> None:
    p = sub.add_parser(
        "pcr",
        help="convert images to Progressive Compressed Records (Beam)",
        description=DESCRIPTION,
    )
    p.add_argument("sources", nargs="+", help="ImageFolder directory, or tar shard templates")
    p.add_argument(
        "--output", "-o", required=True, help="output directory (PCR_<i>.db + PCR_index.pb)"
    )
    p.add_argument(
        "--images-per-record",
        type=int_in(1),
        default=1024,
        help="images per record file (default 1024)",
    )
    p.add_argument(
        "--seed", type=int, help="shuffle images (seeded, deterministic); default: input order"
    )
    p.add_argument(
        "--input-format",
        choices=("auto", "imagefolder", "tar"),
        default="auto",
        help="auto: a local directory is an ImageFolder, anything else tar shards",
    )
    p.add_argument(
        "--label-field", default="cls", help="tar inputs: field holding the integer label"
    )
    p.add_argument(
        "--image-field", help="tar inputs: image field (default: first of jpg, jpeg, png, ...)"
    )
    p.add_argument(
        "--quality",
        type=int_in(1, 100),
        default=90,
        help="JPEG quality for non-JPEG inputs (default 90)",
    )
    p.add_argument(
        "--scans",
        metavar="FILE",
        help="jpegtran scan script (-scans syntax) for 3-component images; default: jpegtran's "
        "standard script (docs/pcr.md, example: docs/scans/chroma-coarse.txt)",
    )
    p.add_argument(
        "--base",
        help="prefix for relative templates (dir, ais://bucket, gs://bucket, s3://bucket, "
        "https://host/path)",
    )
    p.add_argument(
        "--max-rejects",
        type=int_in(0),
        default=0,
        help="exit 3 if more rejects than this (default 0)",
    )
    p.add_argument(
        "--overwrite", action="store_true", help="replace an existing PCR dataset in DIR"
    )
    p.add_argument(
        "--resume", action="store_true", help="reuse the verified work of an interrupted run"
    )
    add_progress_args(p)
    add_store_args(p)
    p.add_argument(
        "--summary-json", help="also write the run summary (totals, counters, time) here"
    )
    add_runner_arg(p, "the in-process driver's threads, the default")
    p.set_defaults(func=run, accepts_beam_args=True)


def run(args) -> int:
    """Failures propagate to ``launch.cli.main`` (one line, its exit code: launch/job_exit.py)."""
    from launch import local_paths
    from launch.args import CLI_WORDS
    from launch.cmd_convert import workers
    from launch.job_exit import rejects_exit
    from pipelines.beam.options import in_process
    from pipelines.job import report
    from pipelines.job.kinds.pcr.config import PcrConfig
    from pipelines.job.refused import Refusal
    from transforms.redact import printable, redact_obj

    def job():
        if args.summary_json:  # checked before the job, as convert does (launch/local_paths.py)
            local_paths.check_file_to_write("--summary-json", args.summary_json)
        created = local_paths.make_output_dir("--output", args.output, is_dir=True)
        cfg = PcrConfig(
            sources=args.sources if len(args.sources) > 1 else args.sources[0],
            output=args.output,
            images_per_record=args.images_per_record,
            seed=args.seed,
            input_format=args.input_format,
            label_field=args.label_field,
            image_field=args.image_field,
            quality=args.quality,
            scans=args.scans,
            base=args.base,
            max_rejects=args.max_rejects,
            overwrite=args.overwrite,
            resume=args.resume,
            **progress_options(args),
            store=store_config(args),
        )
        try:
            if in_process(args.beam_args):  # no Beam import: seconds a small job need not pay
                from pipelines.inprocess.driver import convert_in_process

                return cfg, convert_in_process(cfg, workers(None))
            from pipelines.beam.pcr import convert_pcr
            from pipelines.beam.worker_logs import quiet_beam_worker

            quiet_beam_worker(getattr(args, "debug", False))  # said once, by launch.cli
            return cfg, convert_pcr(cfg, args.beam_args)
        except (
            BaseException
        ) as e:  # a usage error found by the job (a bad --scans), a failure, Ctrl-C
            local_paths.remove_if_empty(created)
            if isinstance(e, Refusal):
                e.worded(CLI_WORDS)  # the options it names, as this command spells them
            raise

    cfg, res = job()
    for path in res.paths:
        print(printable(path))
    print(printable(res.index_path))
    t = res.totals
    lines = [
        f"images:  {t['records_read']} read, {t['records_written']} written, {t['records_rejected']} rejected",
        f"records: {t['shards']} files, {t['bytes_written']} bytes, {len(res.manifest['inputs'])} input(s) "
        f"({t['shards_rejected']} rejected)",
        f"time:    {res.seconds:.1f} s",
        f"rejects: {res.manifest['rejects']['count']} -> {res.rejects_path}",
    ]
    lines += report.reason_lines(res.manifest["rejects"])
    lines.append(f"manifest: {res.manifest_path}")
    print(printable("\n".join(lines)), file=sys.stderr)
    if args.summary_json:
        from launch.local_paths import write_file

        if not write_file(
            "--summary-json",
            args.summary_json,
            json.dumps(
                redact_obj(
                    {
                        "totals": res.totals,
                        "counters": res.counters,
                        "seconds": res.seconds,
                        "paths": res.paths,
                        "exit_code": res.exit_code,
                    }
                ),
                indent=1,
                sort_keys=True,
            ),
        ):
            return 1
    return rejects_exit("pcr", res, cfg.max_rejects)
