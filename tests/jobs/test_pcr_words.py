"""PCR in its own words: ``tar2tf verify`` on a PCR dataset counts record files and
images (not shards and records), and ``iter_pcr(with_keys=True)`` yields ``(key, jpeg,
label)`` as docs/pcr.md says."""

from __future__ import annotations

import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def pcr_out(tmp_path_factory):
    from support.pcr_fixtures import sample_output

    return sample_output(tmp_path_factory.mktemp("pcr-words"))


def test_verify_counts_record_files_and_images(pcr_out, capsys):
    from launch.cli import main

    out, res = pcr_out
    assert main(["verify", out]) == 0
    line = capsys.readouterr().out.strip()
    files = len(res.manifest["shards"])
    images = (
        sum(r["images"] for r in res.manifest["shards"])
        if "images" in res.manifest["shards"][0]
        else None
    )
    assert f"(pcr): {files} record files, " in line, line
    assert " images, " in line and "shards" not in line and "records" not in line, line
    if images is not None:
        assert f", {images} images, " in line, line


def test_with_keys_puts_the_key_first(pcr_out):
    from transforms.pcr.format import record_files
    from transforms.pcr.reader import iter_pcr

    out, _ = pcr_out
    files = record_files(out)
    index = os.path.join(out, "PCR_index.pb")
    plain = list(iter_pcr(files, index, scan_groups=1))
    keyed = list(iter_pcr(files, index, scan_groups=1, with_keys=True))
    assert [k[1:] for k in keyed] == plain
    assert all(isinstance(k[0], str) and k[0] for k in keyed)
    with open(os.path.join(ROOT, "docs", "pcr.md")) as f:
        assert "for key, jpeg_bytes, label in iter_pcr(" in f.read()


def test_loaders_read_full_quality_by_default(pcr_out):
    """Run as docs/pcr.md shows them, the loaders read one scan group (the coarsest
    quality) unless told otherwise: every image differed from its source."""
    from transforms.pcr.format import read_index, record_files
    from transforms.pcr.reader import ProgressiveCompressedRecordDataset, iter_pcr

    out, _ = pcr_out
    files = record_files(out)
    index = os.path.join(out, "PCR_index.pb")
    groups = max(e.groups for e in read_index(index)[1].values())
    full = list(iter_pcr(files, index, scan_groups=groups))
    assert list(iter_pcr(files, index)) == full
    tf_default = ProgressiveCompressedRecordDataset(files, index).as_numpy_iterator()
    assert [(bytes(j), int(label)) for j, label in tf_default] == full
    coarse = list(iter_pcr(files, index, scan_groups=1))
    assert sum(len(j) for j, _ in coarse) < sum(len(j) for j, _ in full)
    with open(os.path.join(ROOT, "docs", "pcr.md")) as f:
        assert "default `scan_groups=None` reads every scan group" in " ".join(f.read().split())
