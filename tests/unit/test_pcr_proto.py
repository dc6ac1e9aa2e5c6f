"""pcr.proto: the shipped gencode matches the .proto, and the format is wire-compatible
with the reference schema in both directions.

The reference schema is rebuilt here from its published facts only (field names, numbers
and types): the TF fork's proto3 messages (package ``tensorflow``) and the converter's
proto2 variant (unpacked ``repeated int32 labels``, ``required progressive_levels``)."""

import os
import subprocess

import numpy as np
import pytest
from support.pcr_fixtures import (
    decode,
    encode,
    jpeg_of,
    photo,
    reference_classes,
    requires_jpegtran,
)
from support.protogen import assert_gencode_fresh

from transforms.pcr import format as fmt
from transforms.pcr import jpeg_scans as js
from transforms.pcr import pcr_pb2
from transforms.pcr import reader as pcr_reader
from transforms.pcr.verify import verify_pcr

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_gencode_matches_proto(tmp_path):
    assert_gencode_fresh("transforms/pcr/pcr.proto", tmp_path)


def _images():
    srcs = [
        encode(photo("chelsea", (48, 32))),
        encode(photo("camera", (40, 32), "L")),
        encode(photo("coffee", (32, 32))),
    ]
    return srcs, [
        js.group_pieces(
            subprocess.run(
                ["jpegtran", "-copy", "none", "-optimize", "-progressive"],
                input=s,
                capture_output=True,
                check=True,
            ).stdout
        )[0]
        for s in srcs
    ]


def _write_reference_dataset(directory, ref, records, repeat_index=10):
    """What the reference converter writes: PCR_<i>.pcr, an index listing lengths, each
    entry repeated once per scan group, no tar2tf fields."""
    index = ref["DatasetOffsetsIndex"]()
    for i, (labels, pieces) in enumerate(records):
        levels = max(len(p) for p in pieces)
        chunks = [
            ref["MetadataRecord"](
                labels=labels, progressive_levels=levels, version=1
            ).SerializeToString()
        ]
        for g in range(levels):
            chunks.append(
                ref["ScanGroup"](
                    image_bytes=[p[g] if g < len(p) else b"" for p in pieces]
                ).SerializeToString()
            )
        name = f"PCR_{i}.pcr"
        with open(os.path.join(directory, name), "wb") as f:
            f.write(b"".join(chunks))
        for _ in range(repeat_index):
            index.records.add(name=name, offsets=[len(c) for c in chunks])
    with open(os.path.join(directory, fmt.INDEX_NAME), "wb") as f:
        f.write(index.SerializeToString())


@requires_jpegtran
@pytest.mark.parametrize("syntax", ["proto2", "proto3"])
def test_we_read_reference_files(tmp_path, syntax):
    ref = reference_classes(syntax)
    srcs, grouped = _images()
    # record 0: three images with all 10 pieces; record 1: raw jpegtran scans, 6 for gray
    raw = [js.split_pieces(b"".join(g) + js.EOI) for g in grouped]
    _write_reference_dataset(str(tmp_path), ref, [([3, 1, 4], grouped), ([5, 9], raw[1:])])
    files = [str(tmp_path / "PCR_0.pcr"), str(tmp_path / "PCR_1.pcr")]
    index = str(tmp_path / fmt.INDEX_NAME)
    assert verify_pcr(str(tmp_path)) == []
    for k in (1, 2, 6, 10, 40):
        ours = list(pcr_reader.iter_pcr(files, index, k))
        assert [label for _, label in ours] == [3, 1, 4, 5, 9]
        expect = [jpeg_of(g[:k]) for g in grouped] + [jpeg_of(r[:k]) for r in raw[1:]]
        assert [j for j, _ in ours] == expect
        tf_items = list(
            pcr_reader.ProgressiveCompressedRecordDataset(files, index, k).as_numpy_iterator()
        )
        assert [(bytes(j), int(label)) for j, label in tf_items] == ours
    full = [j for j, _ in pcr_reader.iter_pcr(files, index, 99)]
    for j, s in zip(full[:3], srcs):
        assert np.array_equal(decode(j), decode(s))


@requires_jpegtran
@pytest.mark.parametrize("syntax", ["proto2", "proto3"])
def test_reference_reads_our_files(tmp_path, syntax):
    ref = reference_classes(syntax)
    srcs, grouped = _images()
    images = [fmt.PcrImage(f"k{i}", 10 + i, g, "x") for i, g in enumerate(grouped)]
    entry = fmt.write_record(str(tmp_path / "PCR_0.db"), images)
    (tmp_path / fmt.INDEX_NAME).write_bytes(fmt.build_index([entry], maps=js.MAPS.values()))
    # a reader that knows only the reference schema: lengths from the index, cumulative sum
    index = ref["DatasetOffsetsIndex"].FromString((tmp_path / fmt.INDEX_NAME).read_bytes())
    assert [r.name for r in index.records] == ["PCR_0.db"]
    lengths = list(index.records[0].offsets)
    data = (tmp_path / "PCR_0.db").read_bytes()
    assert sum(lengths) == len(data)
    meta = ref["MetadataRecord"].FromString(data[: lengths[0]])
    assert list(meta.labels) == [10, 11, 12] and meta.progressive_levels == 10 and meta.version == 1
    off, groups = lengths[0], []
    for n in lengths[1:]:
        groups.append(list(ref["ScanGroup"].FromString(data[off : off + n]).image_bytes))
        off += n
    for i, s in enumerate(srcs):
        for k in (1, 5, 10):
            assert b"".join(g[i] for g in groups[:k]) + js.EOI == jpeg_of(grouped[i][:k])
        assert np.array_equal(decode(b"".join(g[i] for g in groups) + js.EOI), decode(s))
    # and our own fields are there for our readers
    ours = pcr_pb2.MetadataRecord.FromString(data[: lengths[0]])
    assert [im.key for im in ours.images] == ["k0", "k1", "k2"]
    assert [list(im.piece_sizes) for im in ours.images] == [[len(p) for p in g] for g in grouped]


def test_large_records_use_int64_lengths_only():
    chunks = [b"m"] + [b""] * 10
    entry = fmt.index_entry("PCR_0.db", chunks, 1)
    assert list(entry.offsets) == [1] + [0] * 10 and list(entry.offsets64) == list(entry.offsets)
    big = pcr_pb2.RecordOffsetsIndex(
        name="PCR_1.db", offsets64=[100, 2**31, 5], crc32c=[0, 0, 0], num_images=3
    )
    _, entries = fmt.parse_index(pcr_pb2.DatasetOffsetsIndex(records=[big]).SerializeToString())
    assert entries["PCR_1.db"].prefix(1) == 2**31 + 100 and entries["PCR_1.db"].size == 2**31 + 105


def test_int32_offsets_dropped_when_the_record_outgrows_them(monkeypatch):
    monkeypatch.setattr(fmt, "INT32_LIMIT", 10)  # stands in for 2 GiB
    entry = fmt.index_entry("PCR_0.db", [b"meta", b"0123", b"4567"], 1)
    assert list(entry.offsets) == [] and list(entry.offsets64) == [4, 4, 4]
    _, entries = fmt.parse_index(pcr_pb2.DatasetOffsetsIndex(records=[entry]).SerializeToString())
    assert entries["PCR_0.db"].lengths == (4, 4, 4)
