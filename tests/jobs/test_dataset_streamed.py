"""The original Dataset API's streamed load: ``Dataset(...).load(template)`` without
``path=`` yields a ``tf.data.Dataset`` fed in order by worker threads
(``pipelines.tfdata.inmemory.ordered_stream``, ``pipelines.tfdata.streamed_load``)."""

import json
import threading
import time

import numpy as np
import pytest
from support import shardgen

from pipelines import Dataset
from pipelines.tfdata.inmemory import ordered_stream
from transforms.ops import Decode, Resize, Select, SelectJSON

TEMPLATE = "train-{0000..0001}.tar"


def test_ordered_stream_is_ordered_and_bounded():
    produced, consumed, peak = [0], [0], [0]
    lock = threading.Lock()

    def produce(task):
        for j in range(20):
            time.sleep(0.0005 * ((task * 7 + j) % 3))
            with lock:
                produced[0] += 1
                peak[0] = max(peak[0], produced[0] - consumed[0])
            yield (task, j)

    out = []
    for item in ordered_stream(list(range(8)), produce, num_workers=3, prefetch=2):
        out.append(item)
        with lock:
            consumed[0] += 1
        time.sleep(0.001)
    assert out == [(t, j) for t in range(8) for j in range(20)]
    assert peak[0] <= 3 * (2 + 1) + 1  # num_workers * (prefetch + 1), + the item being handed over
    it = ordered_stream(list(range(8)), produce, num_workers=2, prefetch=1)
    assert next(it) == (0, 0)
    it.close()  # stops the workers
    deadline = time.monotonic() + 30
    while [t for t in threading.enumerate() if t.name.startswith("tar2tf-load")]:
        assert time.monotonic() < deadline, "a tar2tf-load thread outlived close() by 30 s"
        time.sleep(0.01)


def test_streamed_dataset_yields_the_elements_in_order(api_shards, monkeypatch):
    """With every shape known, elements cross into tf.data in stacked batches (unbatched in
    TensorFlow); otherwise one by one.  Either way: the same elements, in order, as the
    element spec types them."""
    import tensorflow as tf

    from pipelines.tfdata import streamed_load

    monkeypatch.setattr(streamed_load, "CROSSING_BATCH", 4)  # 18 elements: 4 batches + 2
    template = "train-{0000..0002}.tar"

    def run(ds, **kw):
        tfds = ds.load(template, num_workers=2, **kw)
        got = [tuple(t.numpy() for t in el) for el in tfds]
        want = list(ds.elements(template, 1, ds.element_spec))
        assert len(got) == len(want) == 18
        for (gv, gl), (wv, wl) in zip(got, want):
            if ds.element_spec[0].dtype == tf.string:
                assert isinstance(gv, bytes) and gv == wv
            else:
                assert gv.dtype == ds.element_spec[0].dtype.as_numpy_dtype and np.array_equal(
                    gv, wv
                )
            assert gl.dtype == ds.element_spec[1].dtype.as_numpy_dtype and gl == wl
        return tfds, got

    fixed = Dataset(
        api_shards, conversions=[Decode("jpg"), Resize("jpg", (16, 16))], selections=["jpg", "cls"]
    )
    tfds, got = run(fixed)
    assert tfds.element_spec[0].shape == (16, 16, 3) and got[0][0].shape == (16, 16, 3)
    varying = Dataset(api_shards, conversions=[Decode("jpg")], selections=["jpg", "cls"])
    tfds, got = run(varying, output_shapes=((None, None, 3), ()))
    assert tfds.element_spec[0].shape.as_list() == [None, None, 3] and got[0][0].shape == (
        48,
        64,
        3,
    )
    raw = Dataset(
        api_shards, conversions=[], selections=["jpg", "cls"]
    )  # JPEG bytes: tf.string, shape ()
    tfds, got = run(raw)
    assert tfds.element_spec[0].dtype == tf.string and got[0][0][:2] == b"\xff\xd8"


def test_a_spec_no_record_fits_is_an_error_not_an_empty_dataset(api_shards):
    import tensorflow as tf

    ds = Dataset(api_shards, None, [Decode("jpg"), Resize("jpg", (16, 16))]).load(
        TEMPLATE, output_shapes=((64, 64, 3), ())
    )
    with pytest.raises(
        (ValueError, tf.errors.InvalidArgumentError), match="every record .* was rejected"
    ):
        sum(1 for _ in ds)
    for bad in (0, -1, None, 1.5):
        with pytest.raises(ValueError, match="num_workers must be a positive integer"):
            Dataset(api_shards, None, [Decode("jpg")]).load(TEMPLATE, num_workers=bad)


def test_labels_asked_for_as_strings_and_remote_output_checks(api_shards, tmp_path):
    import tensorflow as tf

    ds = Dataset(api_shards, None, [Decode("jpg"), Resize("jpg", (8, 8))]).load(
        TEMPLATE, output_types=(tf.uint8, tf.string)
    )
    labels = [label for _, label in ds.as_numpy_iterator()]
    assert len(labels) == 12 and all(isinstance(v, bytes) and int(v) >= 0 for v in labels)
    with pytest.raises(ValueError, match="tf.data reads local paths and gs://, not ais://"):
        Dataset(api_shards, None, [Decode("jpg")], remote_output="ais://b/x").load(
            TEMPLATE, remote_exec=True
        )


def test_empty_lists_stream_item_by_item(tmp_path):
    """A zero-size component (detection data: an image with no boxes) cannot cross into
    tf.data in stacked batches: unbatching one crashes TensorFlow (segfault)."""
    members = []
    for i in range(70):  # more than one crossing batch
        members += [
            (f"r{i:03d}.json", json.dumps({"boxes": []}).encode()),
            (f"r{i:03d}.cls", str(i).encode()),
        ]
    shardgen.write_tar(str(tmp_path / "a.tar"), members)
    ds = Dataset(str(tmp_path), selections=[SelectJSON("json", "boxes"), Select("cls")])
    inferred = ds.load("a.tar")  # a JSON list's length is not fixed by any op: left open
    assert inferred.element_spec[0].shape.as_list() == [None]
    fixed = ds.load("a.tar", output_shapes=((0,), ()))  # fixed, and zero-size
    for d in (inferred, fixed):
        got = [(v.shape, int(label)) for v, label in d.as_numpy_iterator()]
        assert got == [((0,), i) for i in range(70)]
