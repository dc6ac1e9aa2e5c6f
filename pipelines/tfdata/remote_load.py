"""``Dataset.load(template)`` in memory, on Beam workers: a Beam job writes the load's
TFRecords, and the dataset reads them back as the same elements as a streamed load.

The records are parsed as stored, then cast where ``output_types`` /
``output_signature`` ask for another dtype (:mod:`pipelines.tfdata.recast`).  The
TFRecords go to ``remote_output`` or a temporary directory, which the dataset reads
whenever it is iterated: it stays until the process exits.
"""

from __future__ import annotations

import tempfile
from typing import List

from pipelines.tfdata import recast, tfrecord_writing
from pipelines.tfdata.parsers import make_record_parser
from pipelines.tfdata.spec_inference import inferred_spec
from pipelines.tfdata.tfquiet import tensorflow
from transforms.ops import leaves
from transforms.stores import get_store, split_url

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


def remote_dataset(ds, template, num_workers, output_types, output_shapes, output_signature):
    """The ``tf.data.Dataset`` over the TFRecords of a Beam job; sets ``ds.element_spec``."""
    tf = tensorflow()  # its devices initialized without a driverless machine's cuInit line

    from transforms.tfrecord.example import parse_example
    from transforms.tfrecord.framing import read_records

    out_dir = ds.remote_output or _scratch_dir()
    scheme = split_url(out_dir)[0]
    if scheme not in ("", "gs"):
        # the dataset is a tf.data.TFRecordDataset over the job's output
        raise ValueError(
            f"remote_output {out_dir!r}: tf.data reads local paths and gs://, not {scheme}://; "
            f"convert with load(path=...) to write TFRecords there"
        )
    write = tfrecord_writing.WriteRequest(
        template,
        out_dir.rstrip("/") + "/part-{}.tfrecord",
        num_workers,
        record_to_example=None,
        max_shard_size="100MB",
        remote_exec=True,
        options={"overwrite": True},
    )
    cfg = tfrecord_writing.config(ds, write, stored=False)
    res = tfrecord_writing.convert(ds, write, cfg)
    el = None
    if res.paths:
        with get_store(res.paths[0]).open_read(res.paths[0]) as f:
            first = parse_example(next(iter(read_records(f))))
        parts = tuple(
            leaves.structured(s, _unflatten(s, n, first))
            for s, n in zip(ds.selections, leaves.NAMES)
        )
        el = parts if len(parts) > 1 else parts[0]
    spec = output_signature
    if spec is None:
        if el is None:
            raise ValueError(f"no record could be converted; see {res.rejects_path}")
        spec = inferred_spec(el, ds.conversions, ds.selections, output_shapes, output_types)
    ds.element_spec = spec
    # parsed as stored, then (only if output_types / output_signature change a dtype)
    # cast as the in-memory load casts: pipelines/tfdata/recast.py
    pair = len(ds.selections) == 2
    stored = spec if el is None else recast.stored_spec(spec, el)
    parse, cast = make_record_parser(stored, with_label=pair), recast.caster(stored, spec, pair)
    return tf.data.TFRecordDataset(res.paths).map(
        parse if cast is None else lambda r: cast(parse(r))
    )


def _unflatten(sel, name, record):
    """A selection's value read back from the ``value``/``label`` entries it was stored as."""
    from transforms.ops.selections import SelectDict, SelectList

    if isinstance(sel, SelectDict):
        return {k: _unflatten(s, f"{name}.{k}", record) for k, s in sel.items.items()}
    if isinstance(sel, SelectList):
        return [_unflatten(s, f"{name}.{i}", record) for i, s in enumerate(sel.items)]
    return record[name]
