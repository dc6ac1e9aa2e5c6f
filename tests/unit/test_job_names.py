"""The names a TFRecord job's output template gives: ``{}`` numbers the shards 1..N, a
Python format spec (``{:05d}``) pads them so that they sort, a plain name gives
``-NNNNN-of-NNNNN``; and the names found again as this output's (stale files, reruns,
``verify``) are the ones it writes."""

from __future__ import annotations

import re

import pytest

from pipelines.job import names


def test_format_spec_pads_the_shard_number():
    # it was taken literally: 'd-{:03d}-00000-of-00003.record'
    assert names.shard_names("o/d-{:03d}.record", 3) == [
        "o/d-001.record",
        "o/d-002.record",
        "o/d-003.record",
    ]
    assert names.shard_name("o/d-{:05}.record", 9, None) == "o/d-00010.record"
    assert names.fill("gs://b/t_{:0>4}.tfrecord", 7) == "gs://b/t_0007.tfrecord"


def test_padded_names_sort_in_shard_order():
    got = names.shard_names("t-{:05d}.record", 12)
    assert sorted(got) == got
    # what the advice to pad is for: "{}" gives t-10 before t-2
    assert sorted(names.shard_names("t-{}.record", 12)) != names.shard_names("t-{}.record", 12)


def test_plain_braces_and_plain_names_keep_their_meaning():
    assert names.shard_names("o/t-{}.record", 2) == ["o/t-1.record", "o/t-2.record"]
    assert names.shard_names("o/t.record", 2) == [
        "o/t-00000-of-00002.record",
        "o/t-00001-of-00002.record",
    ]
    assert names.streams_names("o/t-{:03d}.record") and not names.streams_names("o/t.record")


@pytest.mark.parametrize("output", ["o/d-{}.record", "o/d-{:05d}.record", "o/d_{:03}.record"])
def test_companions_and_patterns_of_a_padded_template(output):
    assert names.companion(output, ".manifest.json") == "o/d.record.manifest.json"
    pat = names.output_pattern(output)
    assert all(pat.match(n) for n in names.shard_names(output, 3))
    assert not pat.match("o/d-1.record.idx") and not pat.match("o/e-001.record")
    assert names.prefix(output) in ("o/d-", "o/d_")


def test_stale_temporaries_of_a_padded_template(tmp_path):
    (tmp_path / ".d-007.record.tmp-1234").write_bytes(b"x")
    found = names.stale_temporaries(str(tmp_path / "d-{:03d}.record"))
    expected = names.stale_temporaries(str(tmp_path / "d-{}.record"))
    assert found == expected


@pytest.mark.parametrize(
    "output, why",
    [
        ("d-{:x}.record", "writes shard 12 as 'c'"),
        ("d-{:5d}.record", "writes shard 1 as '    1'"),
        ("d-{:,}.record", "writes shard 123456 as '123,456'"),
        ("d-{:s}.record", "cannot format a shard number"),
        ("d-{}-{:03d}.record", "only one shard-number field"),
    ],
)
def test_fields_that_do_not_give_decimal_names_are_refused(output, why):
    """Their names would hold letters, spaces or commas, which the job would not find
    again as its own (stale files, a rerun's --overwrite, verify)."""
    with pytest.raises(ValueError, match=re.escape(why)):
        names.check_template(output)


def test_accepted_fields():
    for output in ("d-{}.record", "d-{:05d}.record", "d-{:03}.record", "d.record", "d-{a}.record"):
        names.check_template(output)
