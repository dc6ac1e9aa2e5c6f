"""The original ``Dataset`` API (docs/api.md): ``Dataset(source, ...).load(template, ...)``.

``load`` without ``path`` (or with ``path=""``) returns a streaming ``tf.data.Dataset``; with ``path`` it writes
TFRecord shards through the conversion pipeline and returns their paths.  Ops run as
sample stages in both modes, through the same :class:`transforms.ops.stages.Stages` code.
``remote_exec`` chooses where they run -- see ``docs/ops.md`` ("executed in the cluster"
means: by Beam workers of the configured runner)::

    remote_exec   in-memory load                         load(path=...)
    False         threads in this process                 the in-process driver (no Beam)
    True          Beam job, then a dataset over its       Beam job on the configured runner
                  TFRecords (parsed back to the same      (local FnApiRunner unless --runner
                  elements)                               is given)
    None          Beam job if a cluster runner is         Beam job if beam_args hold a Beam
                  configured (beam_args --runner=...),    option or runner, or shuffle=True;
                  else threads in this process            else the in-process driver

``beam_args=["--runner=local"]`` names the in-process driver, as on the CLI.

An op that cannot be pickled (so cannot be shipped to Beam workers, e.g. a ``Func``
closing over a generator) makes True/None run in this process, with a warning saying why.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
import warnings
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

from pipelines.beam import options as opts
from pipelines.tfdata import datapoints as dp
from pipelines.tfdata import recast
from pipelines.tfdata.inmemory import ordered_stream
from pipelines.tfdata.parsers import make_record_parser
from pipelines.tfdata.pathgen import run_with_path_generator
from pipelines.tfdata.tfquiet import tensorflow
from transforms.ops import (
    Convert,
    Decode,
    Resize,
    Rotate,
    Select,
    SelectDict,
    SelectList,
    fuse,
    leaves,
    walk,
    with_seed,
)
from transforms.ops.gostages import as_stage
from transforms.ops.selection_names import through_selections
from transforms.ops.selections import as_selection
from transforms.ops.stages import Stages, stage_name
from transforms.records import Reject
from transforms.shard_elements import ElementStage, shard_elements
from transforms.shard_elements import describe as describe_reject
from transforms.stores import StoreConfig, split_url
from transforms.tar.records import DEFAULT_MAX_MEMBER_SIZE
from transforms.tar.sources import resolve

log = logging.getLogger("tar2tf")

IMAGE_SIZE = (224, 224)
#: the original API's default value: "jpg" decoded, resized to 224x224x3, float32 in [0, 1]
DEFAULT_VALUE = Convert(Resize(Decode("jpg"), IMAGE_SIZE), "float32")
#: what path= mode stores for it (uint8, 4x smaller); default_record_parser converts it
DEFAULT_STORED_VALUE = Resize(Decode("jpg"), IMAGE_SIZE)
DEFAULT_LABEL = "cls"
_UNSET = object()
_CROSSING_BATCH = 64  # elements per Python -> tf.data crossing in the streamed dataset


_SCRATCH: List[str] = []


def _scratch_dir() -> str:
    """A temporary directory for a remote in-memory load's TFRecords.  The returned dataset
    reads them whenever it is iterated, so they stay until the process exits."""
    if not _SCRATCH:
        import atexit
        import shutil

        atexit.register(lambda: [shutil.rmtree(d, ignore_errors=True) for d in _SCRATCH])
    _SCRATCH.append(tempfile.mkdtemp(prefix="tar2tf-remote-"))
    return _SCRATCH[-1]


class LoadStats:
    """Counts of the last in-memory ``load`` (thread-safe); ``rejects`` lists the Rejects."""

    def __init__(self):
        self._lock = threading.Lock()
        self.records_read = self.records_yielded = self.records_filtered = 0
        self.rejects: List[Reject] = []

    def add(self, what: str, reject: Optional[Reject] = None):
        with self._lock:
            if reject is not None:
                self.rejects.append(reject)
            else:
                setattr(self, what, getattr(self, what) + 1)

    @property
    def records_rejected(self) -> int:
        return sum(1 for r in self.rejects if r.counts_record)


def location(source: str, proxy_url: Optional[str]) -> str:
    """The original API's bucket name + proxy -> ``ais://bucket``; URLs and directories unchanged."""
    if "://" in source:
        return source.rstrip("/")
    if os.path.isdir(source) or source.startswith((".", "/", "~")):
        return os.path.abspath(os.path.expanduser(source))
    if proxy_url or os.environ.get("AIS_ENDPOINT"):
        return "ais://" + source.strip("/")
    raise ValueError(
        f"{source!r} is not a directory; give proxy_url for an AIS bucket, or a URL "
        f"(ais://bucket, gs://bucket)"
    )


class Dataset:
    """Tar shards under ``bucket_or_source`` -> tf.data / TFRecords (see the module doc).

    ``conversions``: ops applied to each record (``[Decode("jpg"), Resize("jpg", (32, 32))]``).
    ``selections``: ``[value, label]`` (or ``[value]``); default ``["jpg", "cls"]`` when
    conversions are given, else the original API's 224x224x3 float32 image and int32 ``cls``.
    ``sample_stages`` / ``example_stages``: go-tfdata-style stages (callables or Beam
    DoFns) run before the conversions / after encoding (path mode).  ``seed`` seeds random
    ops; ``beam_args`` configure the Beam runner; ``remote_output`` is where a remote
    in-memory load writes its TFRecords (default: a local temp directory).
    """

    def __init__(
        self,
        bucket_or_source: str,
        proxy_url: Optional[str] = None,
        conversions: Sequence[Any] = (),
        selections: Optional[Sequence[Any]] = None,
        remote_exec: Optional[bool] = None,
        *,
        seed: int = 0,
        beam_args: Sequence[str] = (),
        sample_stages: Sequence[Any] = (),
        example_stages: Sequence[Any] = (),
        max_member_size=DEFAULT_MAX_MEMBER_SIZE,
        remote_output: Optional[str] = None,
        store: Optional[StoreConfig] = None,
    ):
        self.base = location(bucket_or_source, proxy_url)
        self.store = store or StoreConfig(ais_endpoint=proxy_url)
        self.conversions = fuse(with_seed(list(conversions or ()), seed))
        self.defaulted = selections is None
        if selections is None:
            selections = (
                ["jpg", DEFAULT_LABEL] if self.conversions else [DEFAULT_VALUE, DEFAULT_LABEL]
            )
        self.selections = leaves.normalize_selections(with_seed(list(selections), seed))
        self.remote_exec, self.seed, self.beam_args = remote_exec, seed, list(beam_args)
        self.sample_stages = [as_stage(s) for s in sample_stages]
        self.example_stages = [as_stage(s) for s in example_stages]
        self.max_member_size, self.remote_output = max_member_size, remote_output
        self.stats: Optional[LoadStats] = None
        self.element_spec = None
        self.last_result = None  # ConvertResult of the last path= / remote load

    # -- where the ops run ----------------------------------------------------------------
    def _stored_selections(self):
        if self.defaulted and not self.conversions:
            return [DEFAULT_STORED_VALUE, DEFAULT_LABEL]
        return self.selections

    def unshippable(self, extra: Sequence[Any] = ()) -> Optional[str]:
        """Why the stages cannot be pickled for Beam workers, or None if they can."""
        from apache_beam.internal import pickler

        things = (
            list(self.sample_stages)
            + list(self.conversions)
            + list(self.selections)
            + list(self.example_stages)
            + [x for x in extra if x is not None]
        )
        for thing in things:
            for part in list(walk(thing)) or [thing]:
                try:
                    pickler.dumps(part)
                except Exception as e:
                    return f"{stage_name(part)} cannot be pickled ({e.__class__.__name__}: {e})"
        return None

    def _use_beam(self, remote_exec, in_memory: bool, extra=(), shuffle=False) -> bool:
        mode = self.remote_exec if remote_exec is _UNSET else remote_exec
        if mode is False:
            return False
        if opts.names_in_process(self.beam_args):
            rest = opts.beam_only(self.beam_args)
            conflict = (
                f"takes no Beam options ({' '.join(rest)})"
                if rest
                else "cannot shuffle (a Beam graph step)"
                if shuffle
                else "is not Beam (remote_exec=True)"
                if mode is True
                else None
            )
            if conflict:
                raise ValueError(
                    f"beam_args name --runner=local, the in-process driver, which {conflict}"
                )
            return False
        if mode is None:
            if in_memory:
                if opts.is_local(opts.effective_args(self.beam_args)):
                    return False
            elif opts.in_process(self.beam_args, shuffle):
                # as TFDS builds with its plain writer unless given Beam options: the
                # in-process driver is the fastest on one machine, and writes the same bytes
                return False
        why = self.unshippable(extra)
        if why is not None:
            warnings.warn(
                f"tar2tf: running the ops in this process, not on Beam workers: {why}",
                RuntimeWarning,
                stacklevel=3,
            )
            log.warning("remote execution disabled: %s", why)
            return False
        return True

    # -- load -------------------------------------------------------------------------------
    def load(
        self,
        template,
        num_workers: int = 1,
        output_types=None,
        output_shapes=None,
        output_signature=None,
        path=None,
        record_to_example: Optional[Callable] = None,
        max_shard_size=None,
        remote_exec=_UNSET,
        prefetch: int = 64,
        tfds: bool = False,
        tfds_image=None,
        **convert_options,
    ):
        """See the module docstring.  ``convert_options`` go to ``ConvertConfig``
        (``records_per_shard``, ``type_map``, ``overwrite``, ``max_rejects``, ``shuffle``...).
        ``tfds=True`` with ``path="DIR/<split>.tfrecord"`` also writes TensorFlow Datasets
        metadata into DIR; ``tfds_image`` names features read as images (docs/tfds.md)."""
        if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
            raise ValueError(f"num_workers must be a positive integer, not {num_workers!r}")
        write = (
            template,
            path,
            num_workers,
            record_to_example,
            max_shard_size,
            remote_exec,
            convert_options,
        )
        if tfds or tfds_image:
            return self._to_tfds(tfds, tfds_image, *write)
        if path is not None and path != "":  # as in the original API, an empty path means in memory
            return self._to_tfrecords(*write)
        if self._use_beam(remote_exec, in_memory=True):
            return self._remote_dataset(
                template, num_workers, output_types, output_shapes, output_signature
            )
        return self._stream_dataset(
            template, num_workers, output_types, output_shapes, output_signature, prefetch
        )

    def _to_tfds(self, tfds_flag, image, template, path, *args):
        """``load(path=..., tfds=True)``: the TFRecords, then their TFDS metadata
        (pipelines/export/tfds.py), written only for a complete output."""
        from pipelines.export import tfds

        if not tfds_flag:
            raise ValueError("tfds_image needs tfds=True")
        options = args[-1]  # the convert options, last of _to_tfrecords' arguments
        tfds.check_output(path, image, options.get("type_map"))
        paths = self._to_tfrecords(template, path, *args)
        res = self.last_result
        if res.exit_code != 0:
            count = res.manifest["rejects"]["count"]
            raise ValueError(
                f"tfds: metadata not written: {count} rejects, more than max_rejects "
                f"{options.get('max_rejects', 0)} or every record (see {res.rejects_path})"
            )
        tfds.write_metadata(path, res.manifest, image)
        return paths

    def _config(self, template, output, record_to_example, max_shard_size, options, stored=True):
        from pipelines.job.config import ConvertConfig

        sels = self._stored_selections() if stored else self.selections
        # read back by _remote_dataset (stored=False), a single bool must say it is one
        stages = (
            list(self.sample_stages)
            + list(self.conversions)
            + [leaves.selection_stage(sels, not stored)]
        )
        if (
            record_to_example is not None
        ):  # as in the original API, record_to_example sees the raw converted record
            stages = stages[:-1]
        elif options.get("type_map"):
            # type_map names the record's entries; the selections store them as value/label
            options = dict(options, type_map=through_selections(options["type_map"], sels))
        return ConvertConfig(
            sources=template,
            output=output,
            base=self.base,
            max_shard_size=max_shard_size,
            sample_stages=tuple(stages),
            record_to_example=record_to_example,
            example_stages=tuple(self.example_stages),
            max_member_size=self.max_member_size,
            store=self.store,
            seed=self.seed,
            progress=False,
            **options,
        )

    def _convert(self, cfg, num_workers, remote_exec, extra=()):
        if self._use_beam(remote_exec, in_memory=False, extra=extra, shuffle=cfg.shuffle):
            from pipelines.beam.convert import convert

            args = list(self.beam_args)
            if opts.is_local(opts.effective_args(args)) and not any(
                a.startswith("--direct_num_workers") for a in args
            ):
                args.append(f"--direct_num_workers={max(1, int(num_workers))}")
            res = convert(cfg, args, ("overwrite=True", "resume=True"))
        else:
            from pipelines.local.driver import convert_in_process

            res = convert_in_process(cfg, num_workers)
        if res.totals["records_rejected"] or res.totals["shards_rejected"]:
            log.warning(
                "%d records and %d shards rejected; see %s",
                res.totals["records_rejected"],
                res.totals["shards_rejected"],
                res.rejects_path,
            )
        self.last_result = res
        return res

    def _to_tfrecords(
        self, template, path, num_workers, record_to_example, max_shard_size, remote_exec, options
    ):
        if isinstance(path, os.PathLike):
            path = os.fspath(path)
        if isinstance(path, str):
            cfg = self._config(template, path, record_to_example, max_shard_size, options)
            return list(self._convert(cfg, num_workers, remote_exec, [record_to_example]).paths)
        if callable(path):  # the original client took a generator function as well
            path = path()
        try:
            names = iter(path)
        except TypeError:
            raise TypeError(
                f"path must be a file name, a template or an iterable (generator) of names, "
                f"not {type(path).__name__}"
            ) from None
        tmp = tempfile.mkdtemp(prefix="tar2tf-paths-")
        cfg = self._config(
            template,
            os.path.join(tmp, "part-{}.tfrecord"),
            record_to_example,
            max_shard_size,
            options,
        )
        res = self._convert(cfg, num_workers, remote_exec, [record_to_example])
        return run_with_path_generator(res, names, self.store, bool(options.get("overwrite")))

    def _inferred_spec(self, el, output_shapes, output_types):
        """The element spec taken from a first element.  Its shapes are kept only where the
        ops fix them (a ``Resize``, possibly under ``Convert``/``Rotate``); elsewhere (a
        ``Decode`` alone, JSON lists, ``Func``) the dimensions are left unknown (an
        image's channel count excepted), or every record shaped unlike the first would be
        rejected.  ``output_shapes`` given by the caller win."""
        spec = dp.spec_of(el, output_shapes, output_types)
        if output_shapes is not None:
            return spec
        fixed = _fixed_entries(self.conversions)
        sels = self.selections
        if len(sels) == 1:
            return _relax(spec, sels[0], fixed)
        return tuple(_relax(s, sel, fixed) for s, sel in zip(spec, sels))

    # -- in memory: Beam job, then read its output ------------------------------------------
    def _remote_dataset(self, template, num_workers, output_types, output_shapes, output_signature):
        tf = tensorflow()  # its devices initialized without a driverless machine's cuInit line

        from transforms.tfrecord.example import parse_example
        from transforms.tfrecord.framing import read_records

        out_dir = self.remote_output or _scratch_dir()
        scheme = split_url(out_dir)[0]
        if scheme not in ("", "gs"):
            # the dataset is a tf.data.TFRecordDataset over the job's output
            raise ValueError(
                f"remote_output {out_dir!r}: tf.data reads local paths and gs://, not {scheme}://; "
                f"convert with load(path=...) to write TFRecords there"
            )
        cfg = self._config(
            template,
            out_dir.rstrip("/") + "/part-{}.tfrecord",
            None,
            "100MB",
            {"overwrite": True},
            stored=False,
        )
        res = self._convert(cfg, num_workers, True)
        el = None
        if res.paths:
            first = parse_example(next(iter(read_records(res.paths[0]))))
            parts = tuple(
                leaves.structured(s, _unflatten(s, n, first))
                for s, n in zip(self.selections, leaves.NAMES)
            )
            el = parts if len(parts) > 1 else parts[0]
        spec = output_signature
        if spec is None:
            if el is None:
                raise ValueError(f"no record could be converted; see {res.rejects_path}")
            spec = self._inferred_spec(el, output_shapes, output_types)
        self.element_spec = spec
        # parsed as stored, then (only if output_types / output_signature change a dtype)
        # cast as the in-memory load casts: pipelines/tfdata/recast.py
        pair = len(self.selections) == 2
        stored = spec if el is None else recast.stored_spec(spec, el)
        parse, cast = make_record_parser(stored, with_label=pair), recast.caster(stored, spec, pair)
        return tf.data.TFRecordDataset(res.paths).map(
            parse if cast is None else lambda r: cast(parse(r))
        )

    # -- in memory: streamed from this process's threads or its worker processes ------------
    def _stages(self, spec=None) -> Stages:
        return Stages(
            tuple(self.sample_stages)
            + tuple(self.conversions)
            + (ElementStage(self.selections, spec, strict=getattr(self, "_inferred_types", False)),)
        )

    def elements(
        self,
        template,
        num_workers: int = 1,
        spec=None,
        prefetch: int = 64,
        stats: Optional[LoadStats] = None,
        report: bool = True,
    ) -> Iterator[Any]:
        """The datapoints, as numpy, in source order (what the tf.data dataset yields).

        With ops that do real work per record (decode, resize...) and more than one
        worker and shard, the shards convert in local worker processes (as for
        ``load(path=...)``: ``pipelines.local.pool``) and their elements cross back in
        chunks; otherwise, or if an op cannot be pickled, on this process's threads.

        Rejects are logged once the stream ends (or is closed), grouped: one line per
        reason with its count and an example (``report=False``: not logged)."""
        urls, list_rejects = resolve(template, self.base, self.store)
        stats = stats if stats is not None else LoadStats()
        return _reporting(
            self._elements(urls, list_rejects, num_workers, spec, prefetch, stats), stats, report
        )

    def _elements(self, urls, list_rejects, num_workers, spec, prefetch, stats) -> Iterator[Any]:
        def note(what, reject=None):
            stats.add(what, reject)

        for r in list_rejects:
            note("", r)
        stages = self._stages(spec)
        max_member = int(self.max_member_size)

        def produce(url):  # on this process's threads
            return shard_elements(url, self.store, max_member, stages, note)

        from pipelines.job.config import ConvertConfig

        cfg = ConvertConfig(
            sources=urls,
            output="",
            sample_stages=stages.sample_stages,
            store=self.store,
            max_member_size=max_member,
        )  # what a worker process gets
        from pipelines.local.driver import auto_processes

        procs = auto_processes(num_workers, len(urls), cfg.has_heavy_ops())
        if procs:
            return self._elements_in_workers(cfg, urls, procs, prefetch, note, produce)
        return ordered_stream(urls, produce, num_workers, prefetch)

    def _elements_in_workers(self, cfg, urls, procs, prefetch, note, produce) -> Iterator[Any]:
        from pipelines.local import pool as shard_pool

        blob = shard_pool.pack(cfg, required=False)
        if blob is None:  # an op that cannot be pickled: this process's threads convert
            yield from ordered_stream(urls, produce, procs, prefetch)
            return
        with shard_pool.Pool(blob, "", procs) as pool:
            yield from ordered_stream(
                urls, lambda url: pool.elements(url, note, _CROSSING_BATCH), procs, prefetch
            )

    def _stream_dataset(
        self, template, num_workers, output_types, output_shapes, output_signature, prefetch
    ):
        tf = tensorflow()  # its devices initialized without a driverless machine's cuInit line

        spec = output_signature
        # dtypes taken from the first element (none given): later values must fit them
        self._inferred_types = output_signature is None and output_types is None
        if spec is None:
            probe = LoadStats()
            first = self.elements(template, 1, None, 1, probe, report=False)
            try:
                el = next(first)
            except StopIteration:
                log_rejects(probe.rejects)
                raise ValueError(
                    f"no record under {template!r} could be converted (all rejected or none "
                    f"found); nothing to infer the element spec from"
                ) from None
            finally:
                first.close()
            spec = self._inferred_spec(el, output_shapes, output_types)
        self.element_spec = spec
        self.stats = LoadStats()

        def gen():
            self.stats = LoadStats()
            yield from self.elements(template, num_workers, spec, prefetch, self.stats)
            st = self.stats
            if not st.records_yielded and st.records_rejected:
                # an empty dataset from records that exist is a mistake (an element spec the
                # data cannot fit, an op that fails on everything), not something to train on
                first = next(r for r in st.rejects if r.counts_record)
                raise ValueError(
                    f"every record under {template!r} was rejected ({st.records_rejected}); "
                    f"the first: {describe_reject(first)}"
                )

        if dp.fixed_shapes(spec):
            # tf.data calls back into Python once per generator item (~0.5-1 ms each,
            # measured: more than decoding a small JPEG); with every shape known, items
            # cross in stacked batches and are unbatched in TensorFlow -- same elements
            return tf.data.Dataset.from_generator(
                lambda: dp.stacked(gen(), spec, _CROSSING_BATCH),
                output_signature=dp.batched_spec(spec),
            ).unbatch()
        return tf.data.Dataset.from_generator(gen, output_signature=spec)


def _reporting(items: Iterator[Any], stats: LoadStats, report: bool) -> Iterator[Any]:
    start = len(stats.rejects)
    try:
        yield from items
    finally:
        if report:
            log_rejects(stats.rejects[start:])


def log_rejects(rejects: Sequence[Reject]) -> None:
    """One warning per reason (stage and kind, as the CLI's report groups them): its count
    and the first reject of it, not one line per record."""
    for line in report_lines(rejects):
        log.warning("%s", line)


def report_lines(rejects: Sequence[Reject]) -> List[str]:
    groups: Dict[str, List[Any]] = {}
    for r in rejects:
        g = groups.setdefault(f"{r.stage}: {r.kind}", [0, r])
        g[0] += 1
    return [
        f"{n} rejected: {reason} (e.g. {describe_reject(first)})"
        for reason, (n, first) in groups.items()
    ]


def _fixed_entries(conversions) -> Dict[str, bool]:
    """Entry -> whether the conversion that writes it last gives every record the same
    shape."""
    fixed: Dict[str, bool] = {}
    for op in conversions:
        name = getattr(op, "ext_name", None)
        if name:
            fixed[name] = _op_fixed(op, fixed)
    return fixed


def _op_fixed(op, fixed: Dict[str, bool]) -> bool:
    if isinstance(op, Resize):
        return True
    if isinstance(op, (Convert, Rotate)):  # same shape out as in
        inner = op.what
        return fixed.get(inner, False) if isinstance(inner, str) else _op_fixed(inner, fixed)
    if isinstance(op, Select):
        return fixed.get(op.what, False)
    return False


def _relax(spec, sel, fixed: Dict[str, bool]):
    """``spec`` (following the selection's structure) with unknown dimensions where the ops
    do not fix the shape; rank-3 leaves (images) keep their channel count."""
    import tensorflow as tf

    if isinstance(sel, SelectDict):
        return {k: _relax(spec[k], s, fixed) for k, s in sel.items.items()}
    if isinstance(sel, SelectList):
        return tuple(_relax(x, s, fixed) for x, s in zip(spec, sel.items))
    rank = spec.shape.rank
    if not rank or _op_fixed(as_selection(sel), fixed):
        return spec
    dims = [None] * rank
    if rank == 3:
        dims[2] = spec.shape[2]
    return tf.TensorSpec(dims, spec.dtype)


def _unflatten(sel, name, record):
    """A selection's value read back from the ``value``/``label`` entries it was stored as."""
    from transforms.ops.selections import SelectDict, SelectList

    if isinstance(sel, SelectDict):
        return {k: _unflatten(s, f"{name}.{k}", record) for k, s in sel.items.items()}
    if isinstance(sel, SelectList):
        return [_unflatten(s, f"{name}.{i}", record) for i, s in enumerate(sel.items)]
    return record[name]


# -- the original AisDataset API ----------------------------------------------------------


class AisDataset(Dataset):
    """The original ``AisDataset(bucket, proxy_url, val_op, label_op, num_workers)``."""

    def __init__(
        self,
        bucket_name: str,
        proxy_url: Optional[str] = None,
        val_op: Any = None,
        label_op: Any = None,
        num_workers: int = 1,
        **kwargs,
    ):
        selections = None
        if val_op is not None or label_op is not None:
            selections = [
                val_op if val_op is not None else DEFAULT_VALUE,
                label_op if label_op is not None else DEFAULT_LABEL,
            ]
        super().__init__(bucket_name, proxy_url, selections=selections, **kwargs)
        self.num_workers = num_workers

    def load_from_tar(self, template, path=None, **kwargs):
        kwargs.setdefault("num_workers", self.num_workers)
        return self.load(template, path=path, **kwargs)
