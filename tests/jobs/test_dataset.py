"""The original Dataset/AisDataset API: ``Dataset(...).load(...)`` written with ``path=``,
in memory into Keras, with ``remote_exec``, aliases and rejects (its streamed load:
test_dataset_streamed.py; the rules that need no job: unit/test_dataset_rules.py)."""

import hashlib
import json
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
from support import shardgen
from support.cli_fixtures import crc32c_file

from pipelines import AisDataset, Dataset, default_record_parser, make_record_parser
from transforms.ops import Convert, Decode, Func, Resize, Rotate, Select, SelectDict, SelectJSON
from transforms.tfrecord.framing import read_records

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TEMPLATE = "train-{0000..0001}.tar"


def _sha(p):
    return hashlib.sha256(open(p, "rb").read()).hexdigest()


def _tiny_model(shape, pool):
    import keras

    m = keras.Sequential(
        [
            keras.Input(shape),
            keras.layers.AveragePooling2D(pool),
            keras.layers.Conv2D(4, 3),
            keras.layers.Flatten(),
            keras.layers.Dense(10),
        ]
    )
    m.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return m


def _invert(record):
    return dict(record, jpg=255 - record["jpg"])


@pytest.mark.slow
def test_client_readme_conversions_in_memory_and_fit(api_shards):
    """Dataset(BUCKET, PROXY, [Decode("jpg"), Resize("jpg", (32,32))], ["jpg", "cls"]) + model.fit."""
    import tensorflow as tf

    dataset = Dataset(api_shards, None, [Decode("jpg"), Resize("jpg", (32, 32))], ["jpg", "cls"])
    train = dataset.load(TEMPLATE, num_workers=2)
    assert train.element_spec == (tf.TensorSpec((32, 32, 3), tf.uint8), tf.TensorSpec((), tf.int32))
    got = [(v.numpy(), int(l.numpy())) for v, l in train]
    assert [l for _, l in got] == [i % 10 for i in range(12)]  # source order, labels from .cls
    members = dict(shardgen.sample_members(0, 12))
    for i, (v, _) in enumerate(got):
        np.testing.assert_array_equal(
            v, Resize(Decode("jpg"), (32, 32)).value({"jpg": members[f"{i:06d}.jpg"]})
        )
    assert (
        dataset.stats.records_read == dataset.stats.records_yielded == 12
        and not dataset.stats.rejects
    )
    # the same with Func(f) after the conversions (the original Dataset API's last example), num_workers=4
    with_f = Dataset(
        api_shards, None, [Decode("jpg"), Resize("jpg", (32, 32)), Func(_invert)], ["jpg", "cls"]
    )
    inverted = [
        v for v, _ in with_f.load(TEMPLATE, num_workers=4, remote_exec=False).as_numpy_iterator()
    ]
    assert len(inverted) == 12 and all(
        np.array_equal(a, 255 - b) for a, (b, _) in zip(inverted, got)
    )
    test = dataset.load("train-0002.tar").batch(4)
    model = _tiny_model((32, 32, 3), 2)
    hist = model.fit(train.shuffle(64).batch(4), epochs=1, verbose=0)
    assert np.isfinite(hist.history["loss"][0])
    assert np.isfinite(model.evaluate(test, verbose=0))


@pytest.mark.slow
def test_default_dataset_path_mode_and_default_record_parser(api_shards, tmp_path):
    """Dataset(BUCKET, PROXY).load(...) in memory == load(path=...) + default_record_parser."""
    import tensorflow as tf

    dataset = Dataset(api_shards)
    mem = dataset.load(TEMPLATE, num_workers=2, remote_exec=False)
    assert mem.element_spec == (
        tf.TensorSpec((224, 224, 3), tf.float32),
        tf.TensorSpec((), tf.int32),
    )
    in_memory = list(mem.as_numpy_iterator())
    paths = dataset.load(TEMPLATE, path=str(tmp_path / "train.record"))
    assert [os.path.basename(p) for p in paths] == ["train-00000-of-00001.record"]
    parsed = tf.data.TFRecordDataset(paths).map(default_record_parser)
    back = list(parsed.as_numpy_iterator())
    assert len(back) == len(in_memory) == 12
    for (v1, l1), (v2, l2) in zip(in_memory, back):
        assert v2.dtype == np.float32 and l2.dtype == np.int32
        np.testing.assert_array_equal(v1, v2)
        assert l1 == l2
    # the stored value is uint8 (4x smaller than float32), with shape and dtype features
    rec = tf.train.Example.FromString(next(read_records(paths[0])))
    assert rec.features.feature["value/dtype"].bytes_list.value == [b"uint8"]
    model = _tiny_model((224, 224, 3), 8)
    hist = model.fit(parsed.shuffle(1024).batch(4), epochs=1, verbose=0)
    assert np.isfinite(hist.history["loss"][0])
    # limited TFRecord size: "train-{}.record" + max_shard_size
    many = dataset.load(TEMPLATE, path=str(tmp_path / "s/train-{}.record"), max_shard_size="400KB")
    assert [os.path.basename(p) for p in many] == [
        f"train-{i + 1}.record" for i in range(len(many))
    ]
    assert len(many) > 1 and all(os.path.getsize(p) <= 400_000 for p in many)
    assert sum(1 for _ in tf.data.TFRecordDataset(many)) == 12


def test_remote_exec_true_runs_beam_and_matches_local(api_shards, tmp_path):
    conv = [Decode("jpg"), Resize("jpg", (32, 32))]
    local = Dataset(api_shards, None, conv, ["jpg", "cls"], remote_exec=False)
    remote = Dataset(api_shards, None, conv, ["jpg", "cls"], remote_output=str(tmp_path / "r"))
    a = list(local.load(TEMPLATE).as_numpy_iterator())
    b = list(
        remote.load(TEMPLATE, remote_exec=True).as_numpy_iterator()
    )  # seed: load(..., remote_exec=True)
    assert (
        local.last_result is None and remote.last_result is not None
    )  # a Beam job ran for the remote one
    assert remote.last_result.totals["records_written"] == 12
    assert remote.element_spec == local.element_spec
    assert len(a) == len(b) == 12
    for (v1, l1), (v2, l2) in zip(a, b):
        np.testing.assert_array_equal(v1, v2)
        assert l1 == l2


@pytest.mark.slow
def test_remote_load_scratch_files_go_with_the_process(api_shards, tmp_path):
    """Without ``remote_output`` a remote in-memory load converts into a temporary directory,
    which the dataset reads for as long as the process lives, and which goes with it."""
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    code = (
        "from pipelines import Dataset; from transforms.ops import Decode; "
        f"d = Dataset({api_shards!r}, None, [Decode('jpg')], ['jpg', 'cls']); "
        f"ds = d.load({TEMPLATE!r}, remote_exec=True); "
        "assert sum(1 for _ in ds) == 12; print(d.last_result.paths[0])"
    )
    p = subprocess.run(
        [sys.executable, "-c", code],
        cwd=root,
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=root, TF_CPP_MIN_LOG_LEVEL="3"),
    )
    assert p.returncode == 0, p.stderr
    scratch = os.path.dirname(p.stdout.strip().splitlines()[-1])
    assert os.path.basename(scratch).startswith("tar2tf-remote-") and not os.path.exists(scratch)


def test_unpicklable_func_runs_locally_with_warning(api_shards, tmp_path):
    counter = (i for i in range(10**6))  # generators cannot be pickled: this op cannot be shipped

    def tag(record):
        return dict(record, n=next(counter) * 0)

    dataset = Dataset(
        api_shards, None, [Decode("jpg"), Resize("jpg", (8, 8)), Func(tag)], ["jpg", "cls"]
    )
    with pytest.warns(RuntimeWarning, match=r"Func\(.*tag\) cannot be pickled"):
        ds = dataset.load(TEMPLATE, remote_exec=True)
    assert sum(1 for _ in ds) == 12
    with pytest.warns(RuntimeWarning, match="running the ops in this process"):
        paths = dataset.load(TEMPLATE, path=str(tmp_path / "u.record"), remote_exec=True)
    assert sum(1 for p in paths for _ in read_records(p)) == 12
    # remote_exec None, no Beam options: the in-process driver, nothing to ship or warn of
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        paths = dataset.load(TEMPLATE, path=str(tmp_path / "v.record"))
    assert not [w for w in caught if "running the ops in this process" in str(w.message)]
    assert sum(1 for p in paths for _ in read_records(p)) == 12


def test_in_process_and_beam_paths_identical_across_processes(api_shards, tmp_path):
    """path= output with a random op: Beam and in-process drivers, two processes, same bytes."""
    conv = [Decode("jpg"), Rotate("jpg"), Resize("jpg", (16, 16))]
    beam_paths = Dataset(api_shards, None, conv, seed=5).load(
        TEMPLATE, path=str(tmp_path / "b/x-{}.rec"), max_shard_size="8KB", remote_exec=True
    )
    code = (
        f"import sys; sys.path[:0] = [{ROOT!r}]; from pipelines import Dataset;"
        f"from transforms.ops import Decode, Rotate, Resize;"
        f"print(Dataset({api_shards!r}, None, [Decode('jpg'), Rotate('jpg'), Resize('jpg', (16, 16))], seed=5)"
        f".load({TEMPLATE!r}, path={str(tmp_path / 'l/x-{}.rec')!r}, max_shard_size='8KB', remote_exec=False))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env=dict(os.environ, PYTHONHASHSEED="123"),
    )
    local_paths = eval(out.stdout.strip().splitlines()[-1])
    assert len(beam_paths) == len(local_paths) > 1
    assert [_sha(p) for p in beam_paths] == [_sha(p) for p in local_paths]
    other_seed = Dataset(api_shards, None, conv, seed=6).load(
        TEMPLATE, path=str(tmp_path / "c/x-{}.rec"), max_shard_size="8KB", remote_exec=False
    )
    assert [_sha(p) for p in other_seed] != [_sha(p) for p in local_paths]


def test_path_generator(api_shards, tmp_path):
    def names():
        for i in range(100):
            yield str(tmp_path / ("even" if i % 2 == 0 else "odd") / f"part{i}.tfrecord")

    dataset = Dataset(api_shards, None, [Decode("jpg"), Resize("jpg", (16, 16))])
    paths = dataset.load(TEMPLATE, path=names(), max_shard_size="4KB")
    assert len(paths) > 2 and paths == list(names())[: len(paths)]
    assert sum(1 for p in paths for _ in read_records(p)) == 12
    manifest = json.load(open(paths[0] + ".manifest.json"))
    assert [s["path"] for s in manifest["shards"]] == paths
    assert [s["crc32c"] for s in manifest["shards"]] == [crc32c_file(p) for p in paths]
    with pytest.raises(ValueError, match="yielded 1 names"):
        dataset.load(TEMPLATE, path=iter([str(tmp_path / "one.rec")]), max_shard_size="4KB")
    # a name that exists is replaced only with overwrite=True, as for a string path
    from pipelines.job.refused import OutputExistsError

    precious = tmp_path / "precious.rec"
    precious.write_bytes(b"keep me")
    with pytest.raises(OutputExistsError, match="already exist .*precious.rec.*overwrite=True"):
        dataset.load(TEMPLATE, path=iter([str(precious)]))
    assert precious.read_bytes() == b"keep me"
    assert dataset.load(TEMPLATE, path=iter([str(precious)]), overwrite=True) == [str(precious)]
    assert sum(1 for _ in read_records(str(precious))) == 12
    # a generator function (the original client's form) and a pathlib.Path work too; a
    # path of another kind fails before any conversion runs
    assert dataset.load(TEMPLATE, path=lambda: iter([str(tmp_path / "f.rec")])) == [
        str(tmp_path / "f.rec")
    ]
    assert dataset.load(TEMPLATE, path=tmp_path / "p-{}.rec") == [str(tmp_path / "p-1.rec")]
    with pytest.raises(TypeError, match="path must be a file name"):
        dataset.load(TEMPLATE, path=42)
    # the Beam path names the Python API's option, not the CLI flag
    with pytest.raises(OutputExistsError, match="pass overwrite=True"):
        dataset.load(TEMPLATE, path=str(tmp_path / "p-{}.rec"), remote_exec=True)


def test_empty_path_means_in_memory(api_shards, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where an empty output name would have written
    import tensorflow as tf

    ds = Dataset(api_shards, None, [Decode("jpg"), Resize("jpg", (16, 16))]).load(TEMPLATE, path="")
    assert isinstance(ds, tf.data.Dataset) and sum(1 for _ in ds) == 12
    assert os.listdir(tmp_path) == []


def test_rejects_in_memory_and_path_mode(tmp_path):
    """Corrupt JPEG, PNG on a JPEG-only path, non-image under Decode, invalid JSON under SelectJSON."""
    good = [(f"g{i}.jpg", shardgen.jpeg(i)) for i in range(4)]
    labels = [(f"g{i}.json", json.dumps({"label": i}).encode()) for i in range(4)]
    members = []
    for (n, b), (m, j) in zip(good, labels):
        members += [(n, b), (m, j)]
    members[4:4] = [
        ("bad_jpeg.jpg", shardgen.jpeg(9)[:-300]),
        ("bad_jpeg.json", b'{"label": 1}'),
        ("png.jpg", shardgen.png(8)),
        ("png.json", b'{"label": 1}'),
        ("text.jpg", b"just some text"),
        ("text.json", b'{"label": 1}'),
        ("badjson.jpg", shardgen.jpeg(7)),
        ("badjson.json", b'{"label": 1,,}'),
    ]
    shardgen.write_tar(str(tmp_path / "r.tar"), members)
    dataset = Dataset(
        str(tmp_path),
        None,
        [Decode("jpg", formats=("jpeg",)), Resize("jpg", (16, 16))],
        ["jpg", SelectJSON("json", "label")],
    )
    got = list(dataset.load("r.tar").as_numpy_iterator())
    assert [int(l) for _, l in got] == [0, 1, 2, 3]
    for i, (v, _) in enumerate(got):  # the rest of the data is intact
        np.testing.assert_array_equal(v, Resize(Decode("jpg"), (16, 16)).value({"jpg": good[i][1]}))
    st = dataset.stats
    reasons = {r.key: r.reason for r in st.rejects}
    assert st.records_read == 8 == st.records_yielded + st.records_rejected + st.records_filtered
    _check_reasons(reasons)
    res_paths = dataset.load("r.tar", path=str(tmp_path / "o/r.record"), max_rejects=10)
    res = dataset.last_result
    t = res.totals
    assert t["records_read"] == 8 and t["records_written"] == 4 and t["records_rejected"] == 4
    assert t["records_read"] == t["records_written"] + t["records_rejected"] + t["records_filtered"]
    rejects = [json.loads(x) for x in open(res.rejects_path)]
    assert all(r["stage"] == "op" and r["shard"].endswith("r.tar") for r in rejects)
    _check_reasons({r["key"]: r["reason"] for r in rejects})
    spec = dataset.element_spec
    back = list(
        __import__("tensorflow")
        .data.TFRecordDataset(res_paths)
        .map(make_record_parser(spec))
        .as_numpy_iterator()
    )
    assert len(back) == 4 and all(
        np.array_equal(a[0], b[0]) and a[1] == b[1] for a, b in zip(got, back)
    )


def _check_reasons(reasons):
    assert set(reasons) == {"bad_jpeg", "png", "text", "badjson"}
    assert "Resize(Decode('jpg', formats=JPEG), (16, 16)) failed" in reasons["bad_jpeg"]
    assert "corrupt JPEG image" in reasons["bad_jpeg"]
    assert "unsupported image format PNG: expected JPEG" in reasons["png"]
    assert "not an image" in reasons["text"]
    assert (
        "SelectJSON('json', 'label')" in reasons["badjson"]
        and "invalid JSON in 'json'" in reasons["badjson"]
    )


def test_docs_page_aliases_and_dict_values(tmp_path):
    import tensorflow as tf

    members = []
    for i in range(6):
        members += [
            (f"{i:03d}.jpg", shardgen.jpeg(i)),
            (f"{i:03d}.cls", str(i % 3).encode()),
            (f"{i:03d}.lab1", str(10 + i).encode()),
        ]
    shardgen.write_tar(str(tmp_path / "train-0.tar"), members)
    shardgen.write_tar(str(tmp_path / "train-1.tar"), members[:9])
    ais = AisDataset(str(tmp_path), None, Decode("jpg"), Select("cls"), num_workers=2)
    ds = ais.load_from_tar("train-{0..1}.tar")
    # a Decode alone does not fix the image size: the inferred spec leaves it open
    assert ds.element_spec == (
        tf.TensorSpec((None, None, 3), tf.uint8),
        tf.TensorSpec((), tf.int32),
    )
    assert [int(l) for _, l in ds.as_numpy_iterator()] == [0, 1, 2, 0, 1, 2, 0, 1, 2]
    # images of other sizes are all there (the original AisDataset API's "values: decoded jpg")
    sizes = [(64, 48), (80, 48), (50, 70)]
    mixed = []
    for i in range(6):
        mixed += [(f"m{i}.jpg", shardgen.jpeg(i, size=sizes[i % 3])), (f"m{i}.cls", b"1")]
    shardgen.write_tar(str(tmp_path / "mixed.tar"), mixed)
    got = [
        v.shape
        for v, _ in AisDataset(str(tmp_path), None, Decode("jpg"), Select("cls"))
        .load_from_tar("mixed.tar")
        .as_numpy_iterator()
    ]
    assert got == [(h, w, 3) for w, h in sizes] * 2
    ais2 = AisDataset(
        str(tmp_path),
        None,
        [Resize(Convert(Decode("jpg"), tf.float32), (224, 224)), Select("lab1")],
        Select("cls"),
    )
    ds2 = ais2.load_from_tar("train-0.tar")
    v, l = next(iter(ds2))
    assert (
        set(v) == {"jpg", "lab1"}
        and v["jpg"].shape == (224, 224, 3)
        and v["jpg"].dtype == tf.float32
    )
    assert int(v["lab1"]) == 10 and int(l) == 0
    paths = ais2.load_from_tar("train-0.tar", path=str(tmp_path / "o/t.record"))
    back = list(
        tf.data.TFRecordDataset(paths)
        .map(make_record_parser(ais2.element_spec))
        .as_numpy_iterator()
    )
    mem = list(ds2.as_numpy_iterator())
    assert len(back) == len(mem) == 6
    for (v1, l1), (v2, l2) in zip(mem, back):
        np.testing.assert_array_equal(v1["jpg"], v2["jpg"])
        assert v1["lab1"] == v2["lab1"] and l1 == l2
    # AisDataset(BUCKET, PROXY).load_from_tar(..., path="train.record") + default_record_parser
    default = AisDataset(str(tmp_path), None, num_workers=4)
    dpaths = default.load_from_tar(
        "train-{0..1}.tar", path=str(tmp_path / "d/train.record"), remote_exec=False
    )
    elems = list(
        tf.data.TFRecordDataset(filenames=dpaths).map(default_record_parser).as_numpy_iterator()
    )
    assert [os.path.basename(p) for p in dpaths] == ["train-00000-of-00001.record"] and len(
        elems
    ) == 9
    assert elems[0][0].shape == (224, 224, 3) and [int(x[1]) for x in elems] == [
        0,
        1,
        2,
        0,
        1,
        2,
        0,
        1,
        2,
    ]
    # the original API's custom output_types / output_shapes, and output_signature
    ds3 = Dataset(
        str(tmp_path), conversions=[Decode("jpg")], selections=[SelectDict({"img": "jpg"}), "cls"]
    ).load(
        "train-0.tar",
        output_types=({"img": tf.float32}, tf.int64),
        output_shapes=({"img": (48, 64, 3)}, ()),
    )
    assert ds3.element_spec[0]["img"] == tf.TensorSpec((48, 64, 3), tf.float32)
    assert ds3.element_spec[1] == tf.TensorSpec((), tf.int64)
    sig = (tf.TensorSpec((None, None, 3), tf.uint8), tf.TensorSpec((), tf.int32))
    ds4 = Dataset(str(tmp_path), conversions=[Decode("jpg")]).load(
        "train-0.tar", output_signature=sig
    )
    assert ds4.element_spec == sig and sum(1 for _ in ds4) == 6


def _my_example(record):
    import tensorflow as tf

    img = record["jpg"]
    return tf.train.Example(
        features=tf.train.Features(
            feature={
                "img": tf.train.Feature(bytes_list=tf.train.BytesList(value=[img.tobytes()])),
                "h": tf.train.Feature(int64_list=tf.train.Int64List(value=[img.shape[0]])),
                "label": tf.train.Feature(
                    int64_list=tf.train.Int64List(value=[int(record["cls"])])
                ),
            }
        )
    )


def test_custom_record_to_example_sees_converted_record(api_shards, tmp_path):
    from transforms.tfrecord.example import parse_example

    dataset = Dataset(api_shards, None, [Decode("jpg"), Resize("jpg", (8, 6))])
    paths = dataset.load(
        TEMPLATE, path=str(tmp_path / "c.record"), record_to_example=_my_example, remote_exec=False
    )
    got = [parse_example(r) for p in paths for r in read_records(p)]
    assert [g["label"] for g in got] == [i % 10 for i in range(12)]
    assert all(g["h"] == 6 and len(g["img"]) == 6 * 8 * 3 for g in got)
    assert dataset.last_result.manifest["options"]["record_to_example"] == "_my_example"
