"""go-tfdata stages: selections, Rename, SampleF/TFExampleF, filters, type map, user stages
(callables and Beam DoFns) in the Beam pipeline, with rejects and conservation."""

import json

import apache_beam as beam
import pytest
from support import shardgen

from pipelines.beam.convert import convert
from pipelines.job.kinds.tfrecord.config import ConvertConfig
from transforms.ops import (
    INT64,
    ByExampleF,
    ByKey,
    ByKeyValue,
    ByPrefix,
    BySampleF,
    BySubstring,
    BySuffix,
    FeatureType,
    FilterEmptyExamples,
    FilterEmptySamples,
    Rename,
    SampleF,
    SampleToTFExample,
    TFExampleF,
    as_stage,
)
from transforms.tfrecord.example import parse_example, record_to_example
from transforms.tfrecord.framing import read_records


def sample():
    return {
        "__key__": "k",
        "__shard__": "s",
        "jpg": b"J",
        "cls": b"3",
        "seg.png": b"P",
        "meta.json": b"{}",
    }


def example():
    return record_to_example(sample())


def feats(ex):
    return sorted(ex.features.feature)


def test_selections_on_samples_and_examples():
    s = sample()
    assert sorted(ByKey("jpg", "cls")(s)) == ["__key__", "__shard__", "cls", "jpg"]
    assert sorted(ByKeyValue("cls", "3")(s)) == ["__key__", "__shard__", "cls"]
    assert sorted(ByKeyValue("cls", b"4")(s)) == ["__key__", "__shard__"]
    assert sorted(ByPrefix("seg", "meta")(s)) == ["__key__", "__shard__", "meta.json", "seg.png"]
    assert sorted(BySuffix("png")(s)) == ["__key__", "__shard__", "seg.png"]
    assert sorted(BySubstring("e")(s)) == ["__key__", "__shard__", "meta.json", "seg.png"]
    assert sorted(BySampleF(lambda x: [k for k in x if len(k) == 3])(s)) == [
        "__key__",
        "__shard__",
        "cls",
        "jpg",
    ]
    assert s == sample()  # samples are not mutated
    assert feats(ByKey("jpg")(example())) == ["__key__", "jpg"]
    assert feats(ByKeyValue("cls", b"3")(example())) == ["__key__", "cls"]
    assert feats(ByPrefix("seg")(example())) == ["__key__", "seg.png"]
    assert feats(BySuffix("json")(example())) == ["__key__", "meta.json"]
    assert feats(BySubstring("l")(example())) == ["__key__", "cls"]
    assert feats(ByExampleF(lambda ex: ["jpg", "cls"])(example())) == ["__key__", "cls", "jpg"]


def test_rename_samplef_filters_typemap():
    s = Rename("image", "jpeg", "jpg")(sample())
    assert s["image"] == b"J" and "jpg" not in s
    ex = Rename("label", "cls")(example())
    assert "label" in feats(ex) and "cls" not in feats(ex)
    assert Rename("x", "nothing")(sample()) == sample()
    with pytest.raises(ValueError, match="more than one of jpg, cls"):
        Rename("x", "jpg", "cls")(sample())
    assert SampleF(lambda x: dict(x, n=b"1"))(sample())["n"] == b"1"

    def _relabel(ex):
        ex.features.feature["cls"].bytes_list.value[:] = [b"7"]
        return ex

    relabelled = TFExampleF(_relabel)(example())
    assert feats(relabelled) == feats(example())
    assert list(relabelled.features.feature["cls"].bytes_list.value) == [b"7"]
    assert TFExampleF(lambda ex: None)(example()) is None  # f's None filters the example
    with pytest.raises(TypeError, match="TFExampleF needs a callable"):
        TFExampleF("not callable")
    assert FilterEmptySamples()({"__key__": "k", "__shard__": "s"}) is None
    assert FilterEmptySamples()(sample()) is not None
    assert FilterEmptyExamples()(ByKey()(example())) is None
    assert FilterEmptyExamples()(example()) is not None
    ex = SampleToTFExample({"cls": FeatureType.INT64, "jpg": "bytes"})(dict(sample(), cls=b" 42\n"))
    assert list(ex.features.feature["cls"].int64_list.value) == [42]
    with pytest.raises(ValueError, match="'cls' is not int64"):
        SampleToTFExample("cls:int64")(dict(sample(), cls=b"4.5"))


class TagFn(beam.DoFn):
    """A user DoFn at the sample stage: setup once, drops keys ending in 3."""

    def setup(self):
        self.tag = b"dofn"

    def process(self, record):
        if not record["__key__"].endswith("3"):
            yield dict(record, tag=self.tag)


def _only_even_cls(ex):
    return ex if ex.features.feature["cls"].int64_list.value[0] % 2 == 0 else None


def test_user_stages_in_beam_pipeline(tmp_path):
    members = shardgen.sample_members(0, 8)
    members.insert(4, ("000009.txt", b"lonely"))  # a record without jpg/cls: emptied, then filtered
    members.append(("000010.cls", b"ten"))  # INT64 type map: not an integer -> reject
    shardgen.write_tar(str(tmp_path / "a.tar"), members)
    # a DoFn becomes a callable stage: set up once, then one output per kept record
    stage = as_stage(TagFn())
    assert callable(stage) and not isinstance(stage, beam.DoFn)
    kept = stage({"__key__": "000001", "x": b"1"})
    assert kept == {"__key__": "000001", "x": b"1", "tag": b"dofn"}
    assert stage({"__key__": "000003", "x": b"3"}) is None  # the DoFn yields nothing: filtered
    assert as_stage(_only_even_cls) is _only_even_cls  # a plain callable is its own stage
    with pytest.raises(TypeError, match="a stage must be callable or a Beam DoFn"):
        as_stage(42)
    res = convert(
        ConvertConfig(
            sources=str(tmp_path / "a.tar"),
            output=str(tmp_path / "o/x-{}.rec"),
            type_map={"cls": INT64},
            sample_stages=(
                Rename("label", "cls"),
                ByKey("jpg", "label"),
                FilterEmptySamples(),
                TagFn(),
                Rename("cls", "label"),
            ),
            example_stages=(TFExampleF(_only_even_cls), ByExampleF(lambda ex: ["cls", "tag"])),
            max_rejects=5,
        )
    )
    t = res.totals
    got = [parse_example(r) for p in res.paths for r in read_records(p)]
    # 000000..000007: 3 dropped by the DoFn, odd cls dropped by the example stage; 9 emptied; 10 rejected
    assert [g["__key__"] for g in got] == ["000000", "000002", "000004", "000006"]
    assert all(sorted(g) == ["__key__", "cls", "tag"] and g["tag"] == b"dofn" for g in got)
    assert [g["cls"] for g in got] == [0, 2, 4, 6]
    assert t["records_read"] == 10 and t["records_written"] == 4 and t["records_rejected"] == 1
    assert t["records_filtered"] == 5
    assert t["records_read"] == t["records_written"] + t["records_rejected"] + t["records_filtered"]
    (rej,) = [json.loads(line) for line in open(res.rejects_path)]
    assert (
        rej["key"] == "000010"
        and rej["stage"] == "encode"
        and "'cls' is not int64" in rej["reason"]
    )
    assert res.manifest["options"]["sample_stages"][3] == "TagFn"


def _array_example(**extra):
    import numpy as np

    img = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    return img, record_to_example(
        {"__key__": "k", "__shard__": "s", "image": img, "label": 1, "jpg": b"J", **extra}
    )


def test_example_stages_carry_array_companions():
    """An array stored by an op is three features (x, x/shape, x/dtype); selections and
    Rename on examples treat them as the one entry they are in the sample, so the array
    still parses back -- with parse_example and with TF's default_record_parser."""
    import numpy as np
    import tensorflow as tf

    from pipelines import default_record_parser
    from transforms.tfrecord.example import serialize

    img, _ = _array_example()
    assert feats(ByKey("image", "label")(_array_example()[1])) == [
        "__key__",
        "image",
        "image/dtype",
        "image/shape",
        "label",
    ]
    assert feats(ByPrefix("im")(_array_example()[1])) == [
        "__key__",
        "image",
        "image/dtype",
        "image/shape",
    ]
    assert feats(BySuffix("shape")(_array_example()[1])) == [
        "__key__"
    ]  # companions are not entries
    assert feats(ByExampleF(lambda ex: ["image"])(_array_example()[1])) == [
        "__key__",
        "image",
        "image/dtype",
        "image/shape",
    ]
    assert FilterEmptyExamples()(ByKey("jpg")(_array_example()[1])) is not None
    np.testing.assert_array_equal(
        parse_example(serialize(ByKey("image")(_array_example()[1])))["image"], img
    )

    ex = Rename("value", "image")(_array_example()[1])
    assert feats(ex) == ["__key__", "jpg", "label", "value", "value/dtype", "value/shape"]
    np.testing.assert_array_equal(parse_example(serialize(ex))["value"], img)
    value, label = default_record_parser(tf.constant(serialize(ex)))
    np.testing.assert_array_equal(
        value.numpy(), tf.image.convert_image_dtype(img, tf.float32).numpy()
    )
    assert int(label) == 1

    # renaming bytes onto an array feature: the old shape/dtype must not describe the bytes
    ex = Rename("image", "jpg")(_array_example()[1])
    assert feats(ex) == ["__key__", "image", "label"]
    assert parse_example(serialize(ex))["image"] == b"J"
    # and an array onto bytes: the companions move, the old bytes are replaced
    ex = Rename("jpg", "image")(_array_example()[1])
    assert feats(ex) == ["__key__", "jpg", "jpg/dtype", "jpg/shape", "label"]
    np.testing.assert_array_equal(parse_example(serialize(ex))["jpg"], img)
