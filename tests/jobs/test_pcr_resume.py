"""``tar2tf pcr --resume``: unit blobs an interrupted run finished (blob + sidecar, verified by
sha256) are reused, a damaged one is redone, and the dataset is byte-identical to a clean run."""

import os

from support.pcr_fixtures import requires_jpegtran

from pipelines.beam.pcr import PcrConfig, convert_pcr
from pipelines.job import lifecycle
from pipelines.job.kinds.pcr.kind import PCR, list_units
from pipelines.job.lifecycle import work_dir_for
from pipelines.job.refused import OutputExistsError

pytestmark = requires_jpegtran
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO = os.path.join(ROOT, "launch", "demo", "shards", "demo-{0..3}.tar")


def _files(d):
    """Every output file; the manifest with this run's directory name normalised."""
    out = {
        f: open(os.path.join(d, f), "rb").read()
        for f in sorted(os.listdir(d))
        if f.startswith("PCR")
    }
    out["PCR.manifest.json"] = out["PCR.manifest.json"].replace(d.encode(), b"<out>")
    return out


def _cfg(out, **kw):
    return PcrConfig(sources=DEMO, output=out, images_per_record=20, seed=3, progress=False, **kw)


def test_resume_reuses_verified_units_and_matches_a_clean_run(tmp_path):
    ref = _cfg(str(tmp_path / "ref"))
    clean = convert_pcr(ref, ["--direct_num_workers=1"])
    assert clean.exit_code == 0 and clean.counters.get("shards_resumed", 0) == 0

    # what a run killed after its first three units leaves behind: their blobs and sidecars
    cfg = _cfg(str(tmp_path / "out"), resume=True)
    units, _, inputs, _ = list_units(cfg)
    work = work_dir_for(cfg, inputs)
    done = [lifecycle.convert_unit(PCR, cfg, work, unit, None)[0] for unit in units[:3]]
    damaged = done[0]["blob"]
    data = bytearray(open(damaged, "rb").read())
    data[100] ^= 0xFF
    open(damaged, "wb").write(bytes(data))
    # a PCR record file left half-done under its final name by the killed run is replaced
    open(os.path.join(cfg.output, "PCR_0.db"), "wb").write(b"partial")

    try:
        convert_pcr(_cfg(cfg.output), ["--direct_num_workers=1"])
        raise AssertionError("existing output without --resume/--overwrite must be refused")
    except OutputExistsError:
        pass
    res = convert_pcr(cfg, ["--direct_num_workers=2"])
    assert res.exit_code == 0
    assert res.counters["shards_resumed"] == 2  # units 1 and 2; unit 0 was damaged and redone
    assert res.counters["shards_read"] == len(units) == 4
    assert _files(cfg.output) == _files(ref.output)
    assert not os.path.exists(work)  # work dir removed after success


def test_resume_redoes_units_of_an_image_folder_that_changed(tmp_path):
    from support.pcr_fixtures import encode, make_image_folder, photo

    from transforms.pcr.format import INDEX_NAME, record_files
    from transforms.pcr.reader import iter_pcr

    src = str(tmp_path / "src")
    make_image_folder(
        src,
        {f"c{i % 2}/img{i:03d}.jpg": encode(photo("chelsea", (32 + i % 5, 24))) for i in range(12)},
    )
    cfg = PcrConfig(
        sources=src,
        output=str(tmp_path / "out"),
        images_per_record=5,
        files_per_unit=4,
        progress=False,
        resume=True,
    )
    # what a run killed after its first two units (slices of 4 files) leaves behind
    units, _, inputs, _ = list_units(cfg)
    work = work_dir_for(cfg, inputs)
    for unit in units[:2]:
        lifecycle.convert_unit(PCR, cfg, work, unit, None)
    # then an image that sorts first is added and another removed: slice 0 changes, slice 1
    # (c0/img008, c0/img010, c1/img001, c1/img003) happens to stay the same
    make_image_folder(src, {"c0/aaa_new.jpg": encode(photo("coffee", (30, 20)))})
    os.remove(os.path.join(src, "c0/img002.jpg"))
    res = convert_pcr(cfg, ["--direct_num_workers=1"])
    assert res.exit_code == 0 and res.counters["shards_resumed"] == 1
    out = cfg.output
    keys = [
        k
        for k, _, _ in iter_pcr(record_files(out), os.path.join(out, INDEX_NAME), 1, with_keys=True)
    ]
    tree = sorted(os.path.relpath(os.path.join(r, f), src) for r, _, fs in os.walk(src) for f in fs)
    assert sorted(keys) == tree  # nothing lost, nothing twice


def test_resume_does_not_replace_another_dataset(tmp_path):
    out = str(tmp_path / "out")
    assert convert_pcr(_cfg(out), ["--direct_num_workers=1"]).exit_code == 0
    before = _files(out)
    other = PcrConfig(
        sources=DEMO.replace("{0..3}", "0"),
        output=out,
        images_per_record=20,
        seed=3,
        progress=False,
        resume=True,
    )
    try:
        convert_pcr(other, ["--direct_num_workers=1"])
        raise AssertionError(
            "--resume must not replace a dataset no interrupted run of this job left"
        )
    except OutputExistsError as e:
        assert "no interrupted run of this job" in str(e)
    assert _files(out) == before
