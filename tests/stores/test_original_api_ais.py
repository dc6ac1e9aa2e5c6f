"""Every example of the original ``Dataset``/``AisDataset`` API that names BUCKET_NAME and
PROXY_URL, run against the local AIS cluster (real aisnode) with shards this test uploads:
train-{0..7}.tar.gz.  ``test_client_readme_*``: the AIS tar2tf client's README;
``test_docs_page_*``: AIStore's tar2tf documentation page."""

from __future__ import annotations

import os

import numpy as np
import pytest
from support import shardgen

from pipelines import AisDataset, Dataset, default_record_parser
from transforms.ops import Convert, Decode, Func, Resize, Select
from transforms.stores import StoreConfig, get_store

pytestmark = pytest.mark.ais
PER_SHARD = 3
BATCH_SIZE = 4
EPOCHS = 1


def _members(shard: int):
    out = []
    for i in range(shard * PER_SHARD, (shard + 1) * PER_SHARD):
        out += [
            (f"{i:06d}.jpg", shardgen.jpeg(i, (48, 40))),
            (f"{i:06d}.cls", str(i % 10).encode()),
            (f"{i:06d}.lab1", str(100 + i).encode()),
        ]
    return out


@pytest.fixture(scope="module")
def original_env(ais_cluster, tmp_path_factory):
    """(BUCKET_NAME, PROXY_URL) with train-{0..7}.tar.gz uploaded."""
    bucket = ais_cluster.new_bucket("original-api")
    d = tmp_path_factory.mktemp("original-api-shards")
    for s in range(8):
        p = shardgen.write_tar(str(d / f"train-{s}.tar.gz"), _members(s), gz=True)
        ais_cluster.put(bucket, f"train-{s}.tar.gz", open(p, "rb").read())
    return bucket, ais_cluster.endpoint


def _labels(shards):
    return [i % 10 for s in shards for i in range(s * PER_SHARD, (s + 1) * PER_SHARD)]


def _tiny_model(shape, pool):
    import keras

    m = keras.Sequential(
        [
            keras.Input(shape),
            keras.layers.AveragePooling2D(pool),
            keras.layers.Flatten(),
            keras.layers.Dense(10),
        ]
    )
    m.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return m


def _f(record):  # the original example's custom Func(f): here, invert the decoded, resized image
    return dict(record, jpg=255 - record["jpg"])


def test_client_readme_conversions_remote_exec_and_fit(original_env, tmp_path):
    import tensorflow as tf

    BUCKET_NAME, PROXY_URL = original_env
    dataset = Dataset(
        BUCKET_NAME,
        PROXY_URL,
        [Decode("jpg"), Resize("jpg", (32, 32))],
        ["jpg", "cls"],
        remote_output=str(tmp_path / "remote"),
    )
    remote = dataset.load("train-{0..3}.tar.gz", remote_exec=True)  # transforms run as a Beam job
    assert dataset.last_result is not None and dataset.last_result.totals["records_written"] == 12
    local = Dataset(
        BUCKET_NAME, PROXY_URL, [Decode("jpg"), Resize("jpg", (32, 32))], ["jpg", "cls"]
    )
    in_process = list(local.load("train-{0..3}.tar.gz").as_numpy_iterator())
    got = list(remote.as_numpy_iterator())
    assert [int(l) for _, l in got] == [int(l) for _, l in in_process] == _labels(range(4))
    for (a, _), (b, _) in zip(got, in_process):
        assert a.shape == (32, 32, 3) and a.dtype == np.uint8
        np.testing.assert_array_equal(a, b)
    train_dataset = remote.shuffle(64).batch(BATCH_SIZE)
    test_dataset = dataset.load("train-{4..7}.tar.gz").batch(BATCH_SIZE)
    assert sum(int(tf.shape(v)[0]) for v, _ in test_dataset) == 12
    model = _tiny_model((32, 32, 3), 4)
    hist = model.fit(train_dataset, epochs=EPOCHS, verbose=0)
    assert np.isfinite(hist.history["loss"][0])


@pytest.mark.slow
def test_client_readme_default_in_memory_num_workers_and_faults(
    original_env, ais_cluster, ais_proxies
):
    import tensorflow as tf

    BUCKET_NAME, PROXY_URL = original_env
    dataset = Dataset(BUCKET_NAME, PROXY_URL)
    train_dataset = dataset.load("train-{0..3}.tar.gz")
    assert train_dataset.element_spec == (
        tf.TensorSpec((224, 224, 3), tf.float32),
        tf.TensorSpec((), tf.int32),
    )
    one = list(train_dataset.as_numpy_iterator())
    assert [int(l) for _, l in one] == _labels(range(4))
    assert all(0.0 <= v.min() and v.max() <= 1.0 for v, _ in one)
    four = list(
        dataset.load("train-{0..3}.tar.gz", num_workers=4, remote_exec=False).as_numpy_iterator()
    )
    assert len(four) == len(one) and all(
        np.array_equal(a[0], b[0]) and a[1] == b[1] for a, b in zip(one, four)
    )
    assert (
        len(
            list(
                dataset.load("train-{4..7}.tar.gz", num_workers=4, remote_exec=False).batch(
                    BATCH_SIZE
                )
            )
        )
        == 3
    )
    # the same load through a faulty network: identical elements
    front, data = ais_proxies
    front.clear()
    for s in range(4):
        data.add(
            "truncate", method="GET", path=f"/v1/objects/{BUCKET_NAME}/train-{s}.tar.gz", after=2000
        )
    data.add("status", method="GET", path=f"/v1/objects/{BUCKET_NAME}/", status=503, times=2)
    faulty = Dataset(
        BUCKET_NAME, front.url, store=StoreConfig(ais_endpoint=front.url, retry_initial_s=0.01)
    )
    again = list(faulty.load("train-{0..3}.tar.gz", num_workers=4).as_numpy_iterator())
    assert data.faults() == 6 and faulty.stats.rejects == []
    assert len(again) == len(one) and all(
        np.array_equal(a[0], b[0]) and a[1] == b[1] for a, b in zip(one, again)
    )
    front.clear()


def test_client_readme_path_modes(original_env, tmp_path, monkeypatch):
    import tensorflow as tf

    BUCKET_NAME, PROXY_URL = original_env
    monkeypatch.chdir(tmp_path)
    dataset = Dataset(BUCKET_NAME, PROXY_URL)
    records = dataset.load("train-{0..3}.tar.gz", path="train.record")
    assert records == ["train-00000-of-00001.record"] and os.path.isfile(tmp_path / records[0])
    train_dataset = tf.data.TFRecordDataset(filenames=records).map(default_record_parser)
    parsed = list(train_dataset.as_numpy_iterator())
    mem = list(dataset.load("train-{0..3}.tar.gz").as_numpy_iterator())
    assert len(parsed) == len(mem) == 12
    assert all(np.array_equal(a[0], b[0]) and a[1] == b[1] for a, b in zip(parsed, mem))
    assert len(list(train_dataset.shuffle(buffer_size=1024).batch(BATCH_SIZE))) == 3
    filenames = dataset.load("train-{0..3}.tar.gz", path="train-{}.record", max_shard_size="100MB")
    assert filenames == ["train-1.record"]
    small = dataset.load(
        "train-{0..3}.tar.gz", path="small/train-{}.record", max_shard_size="200KB"
    )
    assert len(small) > 1 and all(os.path.getsize(p) <= 200_000 for p in small)
    assert sum(1 for _ in tf.data.TFRecordDataset(filenames=small).map(default_record_parser)) == 12
    # the same shards written into the bucket itself (ais:// output), byte-identical
    in_bucket = dataset.load(
        "train-{0..3}.tar.gz",
        path=f"ais://{BUCKET_NAME}/tfr/train-{{}}.record",
        max_shard_size="200KB",
    )
    assert in_bucket == [f"ais://{BUCKET_NAME}/tfr/train-{i + 1}.record" for i in range(len(small))]
    store = get_store(in_bucket[0], dataset.store)
    assert [store.read_bytes(u) for u in in_bucket] == [open(p, "rb").read() for p in small]


def test_client_readme_custom_func(original_env):
    BUCKET_NAME, PROXY_URL = original_env
    plain = Dataset(
        BUCKET_NAME, PROXY_URL, [Decode("jpg"), Resize("jpg", (32, 32))], ["jpg", "cls"]
    )
    dataset = Dataset(
        BUCKET_NAME, PROXY_URL, [Decode("jpg"), Resize("jpg", (32, 32)), Func(_f)], ["jpg", "cls"]
    )
    train_dataset = dataset.load("train-{0..3}.tar.gz").shuffle(64).batch(BATCH_SIZE)
    assert sum(int(v.shape[0]) for v, _ in train_dataset) == 12
    test_dataset = dataset.load("train-{4..7}.tar.gz").batch(BATCH_SIZE)
    a = [v for b, _ in test_dataset.as_numpy_iterator() for v in b]
    b = [v for v, _ in plain.load("train-{4..7}.tar.gz").as_numpy_iterator()]
    assert len(a) == len(b) == 12 and all(np.array_equal(x, 255 - y) for x, y in zip(a, b))


@pytest.mark.slow
def test_docs_page_ais_dataset_examples(original_env, tmp_path, monkeypatch):
    import tensorflow as tf

    BUCKET_NAME, PROXY_URL = original_env
    monkeypatch.chdir(tmp_path)
    ais = AisDataset(BUCKET_NAME, PROXY_URL)
    train_dataset = ais.load_from_tar("train-{0..3}.tar.gz").shuffle(64).batch(BATCH_SIZE)
    assert sorted(int(x) for _, l in train_dataset for x in l) == sorted(_labels(range(4)))
    ais4 = AisDataset(BUCKET_NAME, PROXY_URL, num_workers=4)
    test_dataset = ais4.load_from_tar("train-{4..7}.tar.gz")
    assert [int(l) for _, l in test_dataset.as_numpy_iterator()] == _labels(range(4, 8))
    # intermediate TFRecords: "train.record", then "train-{}.record" with max_shard_size
    written = AisDataset(BUCKET_NAME, PROXY_URL).load_from_tar(
        "train-{0..3}.tar.gz", path="train.record"
    )
    parsed = (
        tf.data.TFRecordDataset(filenames=written)
        .map(default_record_parser)
        .shuffle(buffer_size=1024)
    )
    assert sum(1 for _ in parsed.batch(BATCH_SIZE).unbatch()) == 12
    filenames = ais.load_from_tar(
        "train-{0..3}.tar.gz", path="train-{}.record", max_shard_size="200KB"
    )
    assert len(filenames) > 1 and sum(1 for _ in tf.data.TFRecordDataset(filenames=filenames)) == 12
    # custom tar-record to datapoint translation: values decoded "jpg", labels "cls"
    custom = AisDataset(BUCKET_NAME, PROXY_URL, Decode("jpg"), Select("cls"))
    v, l = next(iter(custom.load_from_tar("train-{0..3}.tar.gz")))
    assert v.shape == (40, 48, 3) and v.dtype == tf.uint8 and int(l) == 0
    # values: "jpg" decoded, float32, resized, joined with "lab1" into a dict; labels "cls"
    nested = AisDataset(
        BUCKET_NAME,
        PROXY_URL,
        [Resize(Convert(Decode("jpg"), tf.float32), (224, 224)), Select("lab1")],
        Select("cls"),
    )
    got = list(nested.load_from_tar("train-{4..7}.tar.gz").as_numpy_iterator())
    assert len(got) == 12
    v, l = got[0]
    assert v["jpg"].shape == (224, 224, 3) and v["jpg"].dtype == np.float32
    assert int(v["lab1"]) == 100 + 4 * PER_SHARD and int(l) == (4 * PER_SHARD) % 10
