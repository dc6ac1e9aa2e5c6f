"""``tar2tf convert SOURCE... --output PATH``: tar shards to size-bounded TFRecord shards
(or ArrayRecord shards of the same records: ``--format array_record``).

With no runner flag the job runs on the in-process driver (``pipelines.inprocess``; also
``--runner inprocess``), the fastest on one machine.  Other ``--flags`` make it a Beam job if
they are Beam pipeline options (``--runner beam``: Beam's local runner, ``--runner
FlinkRunner``, ``--direct_num_workers=4`` ...); any other flag is a usage error
(launch/runner_args.py: :func:`check_beam_args`).  ``--shuffle`` needs the Beam graph, so
with no runner flag it runs on Beam's local runner.
"""

from __future__ import annotations

import json
import sys
from typing import List

from launch.args import UsageError, add_runner_arg, int_in, size
from launch.progress_args import add_progress_args, progress_options
from launch.store_args import add_store_args, store_config
from pipelines.job.kinds.tfrecord.config import MAX_PROCESSES

# what ``tar2tf convert --help`` says (the module docstring names the code for developers)
DESCRIPTION = """\
tar2tf convert SOURCE... --output PATH: tar shards to size-bounded TFRecord shards (or
ArrayRecord shards of the same records: --format array_record).

With no runner flag the job runs on tar2tf's in-process driver (also --runner inprocess), the
fastest on one machine.  --runner beam runs it on Beam's local runner, --runner FlinkRunner
(DataflowRunner ...) on that Beam runner; any other Beam pipeline option
(--direct_num_workers=4 ...) makes it a Beam job too, and a flag that is neither tar2tf's
nor Beam's is a usage error.  --shuffle needs Beam, so with no runner flag it runs on
Beam's local runner.  Every flag: docs/cli.md.
"""

# the CLI's bound when --max-shard-size is not given (docs/cli.md says why this size); the
# Python API keeps writing one file unless asked
DEFAULT_MAX_SHARD_SIZE = "200MB"


def register(sub) -> None:
    p = sub.add_parser(
        "convert",
        help="convert tar shards to TFRecord (or ArrayRecord) shards",
        description=DESCRIPTION,
    )
    p.add_argument(
        "sources",
        nargs="+",
        help="shard templates: train-{0000..0147}.tar, gs://b/x-*.tgz, ais://b/..., s3://b/..., "
        "https://host/x-{0..9}.tar",
    )
    p.add_argument(
        "--output",
        "-o",
        required=True,
        help="output path: 'out/train-{:05d}.record' numbers 00001..N (a Python format "
        "spec: padded names sort; 'out/train-{}.record' gives 1..N); 'out/train.record' gives "
        "out/train-00000-of-0000N.record; 'out/train.array_record' writes ArrayRecord; "
        "local, gs://, ais:// or s3://",
    )
    p.add_argument(
        "--format",
        choices=("tfrecord", "array_record"),
        default=None,
        help="the shards' file format (default: array_record for an output named "
        "*.array_record, else tfrecord); array_record: ArrayRecord files of the same "
        "serialized Examples, for Grain (docs/arrayrecord.md)",
    )
    p.add_argument(
        "--base",
        help="prefix for relative templates (dir, ais://bucket, gs://bucket, s3://bucket, "
        "https://host/path)",
    )
    p.add_argument(
        "--max-shard-size",
        type=size,
        metavar="SIZE",
        default=DEFAULT_MAX_SHARD_SIZE,
        help="bound on each output file, framing included: 100MB, 1GiB, 5000000 "
        f"(default {DEFAULT_MAX_SHARD_SIZE}: files of 100 MB or more, as TensorFlow advises, "
        "and enough of them to read in parallel; docs/cli.md); with --format array_record, "
        "the records' TFRecord size, so that both formats cut at the same records",
    )
    p.add_argument("--records-per-shard", type=int_in(1), help="bound on records per output file")
    p.add_argument(
        "--type-map", help="typed features, e.g. cls:int64,score:float (default: all bytes)"
    )
    p.add_argument(
        "--ops", help="ops spec: JSON/YAML file or string, or module:function returning ops"
    )
    p.add_argument(
        "--max-member-size",
        type=size,
        metavar="SIZE",
        default="256MB",
        help="tar members larger than this are rejected (default 256MB)",
    )
    p.add_argument(
        "--max-record-size",
        type=size,
        metavar="SIZE",
        default=None,
        help="records whose members add up to more than this are rejected; it also bounds "
        "what the tar reader holds, see docs/bad-input.md (default 512MB, or "
        "--max-member-size if larger)",
    )
    p.add_argument(
        "--max-image-pixels",
        type=int_in(1),
        metavar="N",
        default=None,
        help="images larger than this many pixels (read from their header, before decoding) "
        "are rejected (default 64000000)",
    )
    p.add_argument(
        "--max-rejects",
        type=int_in(0),
        default=0,
        help="exit 3 if more rejects than this (default 0)",
    )
    p.add_argument("--overwrite", action="store_true", help="replace existing output shards")
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue an interrupted run: keep its journaled final shards "
        "and finished pieces, convert the rest",
    )
    p.add_argument(
        "--dali-index", action="store_true", help="write DALI tfrecord2idx files beside shards"
    )
    p.add_argument(
        "--tfds",
        action="store_true",
        help="also write TensorFlow Datasets metadata beside the shards, for "
        "tfds.builder_from_directory(DIR); --output must be a local DIR/<split>.tfrecord "
        "(docs/tfds.md)",
    )
    p.add_argument(
        "--tfds-image",
        metavar="NAMES",
        help="with --tfds: features holding one encoded image each, read as "
        "tfds.features.Image: jpg, or jpg,png:1 (channels; default 3); a record whose image "
        "TFDS could not decode is an op reject",
    )
    p.add_argument(
        "--shuffle", action="store_true", help="globally shuffle records across shards (seeded)"
    )
    p.add_argument("--seed", type=int, default=0, help="seed for --shuffle and random ops")
    add_store_args(p)
    p.add_argument(
        "--work-dir", help="where pieces go while the job runs (default beside the output)"
    )
    p.add_argument(
        "--summary-json", help="also write the run summary (totals, counters, time) here"
    )
    add_progress_args(p)
    p.add_argument(
        "--spool-limit",
        type=size,
        metavar="SIZE",
        help="output in a bucket: finished shards waiting for upload in local spool files may hold "
        "this much before the writer waits: 500MB, 2GB (default $TAR2TF_SPOOL_LIMIT, else 1GB)",
    )
    p.add_argument(
        "--processes",
        type=int_in(0, MAX_PROCESSES),
        metavar="N",
        help="local runs: N worker processes (default: one per core), never more than the "
        f"input shards; at most {MAX_PROCESSES}; on the in-process driver, 0 converts on "
        "threads of this process",
    )
    add_runner_arg(p, "tar2tf's in-process driver, the default")
    p.set_defaults(func=run, accepts_beam_args=True)


def build_config(args):
    from pipelines.job.kinds.tfrecord.config import ConvertConfig
    from transforms.ops.selection_names import through_selections

    conversions, selections = (), ()
    if args.ops:
        from launch.opsspec import load_ops

        conversions, selections = load_ops(args.ops, seed=args.seed)
    stages = list(conversions)
    if selections:
        from transforms.ops.leaves import selection_stage

        stages.append(selection_stage(selections))
    if args.tfds_image:
        from pipelines.export.tfds_features import image_checks

        # after every other stage: the features as written are the ones TFDS decodes
        stages.extend(image_checks(args.tfds_image))
    fmt = output_format(args)
    if fmt == "array_record" and (args.shuffle or args.dali_index):
        raise UsageError(
            f"--format array_record takes no {'--shuffle' if args.shuffle else '--dali-index'}: "
            + (
                "Grain shuffles an ArrayRecord dataset by index as it reads"
                if args.shuffle
                else "a DALI index describes TFRecord files"
            )
        )
    if fmt == "array_record":
        from transforms.arrayrecord import format as arf

        if not arf.available():
            raise UsageError(
                "--format array_record needs the array-record package: "
                "pip install 'tar2tf[array-record]'"
            )
    return ConvertConfig(
        format=fmt,
        sources=args.sources,
        output=args.output,
        base=args.base,
        max_shard_size=args.max_shard_size,
        records_per_shard=args.records_per_shard,
        type_map=through_selections(args.type_map, selections),
        sample_stages=tuple(stages),
        max_member_size=args.max_member_size,
        max_record_size=args.max_record_size,
        max_rejects=args.max_rejects,
        overwrite=args.overwrite,
        resume=args.resume,
        store=store_config(args),
        dali_index=args.dali_index,
        shuffle=args.shuffle,
        seed=args.seed,
        **progress_options(args),
        work_dir=args.work_dir,
        processes=args.processes,
        spool_limit=args.spool_limit,
        max_image_pixels=args.max_image_pixels,
    )


def output_format(args) -> str:
    """``--format``, or the one the output's extension names (``.array_record``); a
    format that contradicts the extension is a usage error: TFDS and readers pick their
    reader by it."""
    named = "array_record" if args.output.endswith(".array_record") else None
    if args.format is None:
        return named or "tfrecord"
    if args.format == "tfrecord" and named:
        raise UsageError("--format tfrecord with an output named *.array_record: drop one")
    return args.format


def check_paths(args) -> List[str]:
    """Usage errors in the paths the job will write, found before it starts (see
    launch/local_paths.py); creates a missing local output directory, as the job would,
    and returns what it created."""
    from launch import local_paths
    from pipelines.job.names import companion

    name = args.output.rsplit("/", 1)[-1]
    if not companion(name, "") or companion(name, "").startswith("."):
        # an empty stem: shards named "-00000-of-00003" or "1", a hidden ".manifest.json"
        # (also "{}.record": its manifest would be ".record.manifest.json")
        raise UsageError("--output needs a file name (e.g. out/train-{}.record)")
    if args.work_dir:
        local_paths.check_dir_to_be("--work-dir", args.work_dir)
    if args.summary_json:
        local_paths.check_file_to_write("--summary-json", args.summary_json)
    return local_paths.make_output_dir("--output", args.output)


def workers(processes) -> int:
    """The in-process driver's worker count: ``--processes``, else one per core."""
    import os

    return max(1, processes if processes is not None else os.cpu_count() or 1)


def check_tfds(args) -> None:
    """``--tfds``: an output TFDS cannot load is a usage error before the job runs."""
    if args.tfds_image and not args.tfds:
        raise UsageError("--tfds-image needs --tfds")
    if args.tfds:
        from pipelines.export import tfds

        try:
            tfds.check_output(args.output, args.tfds_image, args.type_map)
        except ValueError as e:
            raise UsageError(str(e)) from None


def run(args) -> int:
    """Failures propagate to ``launch.cli.main``, which says them in one line with their
    exit code (launch/job_exit.py)."""
    from launch.args import CLI_WORDS
    from launch.job_exit import rejects_exit
    from launch.local_paths import remove_if_empty, write_file
    from pipelines.beam.options import in_process, names_in_process, runner_name
    from pipelines.inprocess.driver import convert_in_process
    from pipelines.job import report
    from pipelines.job.refused import Refusal
    from transforms.redact import printable, redact_obj

    if args.shuffle and names_in_process(args.beam_args):
        raise UsageError(
            f"--shuffle needs the Beam graph: drop --runner {runner_name(args.beam_args)} "
            "(or use --runner beam)"
        )
    check_tfds(args)
    cfg = build_config(args)
    created = check_paths(args)
    try:
        # no Beam import: seconds a small job need not pay
        if in_process(args.beam_args, shuffle=args.shuffle):
            res = convert_in_process(cfg, workers(args.processes))
        else:
            from pipelines.beam.convert import convert
            from pipelines.beam.worker_logs import quiet_beam_worker

            quiet_beam_worker(args.debug)  # the failure is said once, by launch.cli
            res = convert(cfg, args.beam_args)
    except BaseException as e:  # a usage error the job found, a failure, Ctrl-C: no empty dirs left
        remove_if_empty(created)
        if isinstance(e, Refusal):
            e.worded(CLI_WORDS)  # the options it names, as this command spells them
        raise
    for p in res.paths:
        print(printable(p))
    rep = redact_obj(report.build(res))
    print(printable(report.text(rep)), file=sys.stderr)
    if args.summary_json:
        if not write_file(
            "--summary-json", args.summary_json, json.dumps(rep, indent=1, sort_keys=True)
        ):
            return 1
    code = rejects_exit("convert", res, cfg.max_rejects)
    if code == 0 and args.tfds:  # metadata only for a complete output (pipelines/export/tfds.py)
        from pipelines.export import tfds
        from pipelines.job import exits

        try:
            written = tfds.write_metadata(args.output, res.manifest, args.tfds_image)
        except BaseException as e:
            exits.mark_started(e)  # the job wrote its output: this is no usage error
            raise
        print(printable(tfds.summary_line(written, args.output)), file=sys.stderr)
    return code
