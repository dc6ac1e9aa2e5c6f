"""PCR from and to object stores: tar shards in a real AIS cluster / GCS emulator bucket,
records, index and manifest written back to the bucket, verified and read from there."""

import os

import numpy as np
from support.pcr_fixtures import decode, encode, make_tar, photo, requires_jpegtran

from transforms.pcr import format as fmt
from transforms.pcr import reader as pcr_reader
from transforms.pcr.verify import verify_pcr

pytestmark = requires_jpegtran
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_pcr_from_and_to_a_bucket(backend, tmp_path):
    from pipelines.beam.pcr import PcrConfig, convert_pcr
    from pipelines.job.kinds.pcr.kind import manifest_path

    images = {
        f"s/{i}": encode(photo(n, (48, 32 + 8 * i)))
        for i, n in enumerate(("chelsea", "coffee", "rocket"))
    }
    shard = make_tar(
        str(tmp_path / "a.tar"),
        [(k, {"jpg": v, "cls": str(i).encode()}) for i, (k, v) in enumerate(images.items())]
        + [("s/bad", {"jpg": b"junk", "cls": b"0"})],
    )
    backend.put("in/a.tar", open(shard, "rb").read())
    cfg = backend.config()
    out = backend.url("pcr")
    res = convert_pcr(
        PcrConfig(
            sources=[backend.url("in/a.tar"), backend.url("in/missing.tar")],
            output=out,
            images_per_record=2,
            seed=1,
            max_rejects=5,
            store=cfg,
        ),
        ["--direct_num_workers=2"],
    )
    t = res.totals
    assert t["records_read"] == 4 and t["records_written"] == 3 and t["records_rejected"] == 1
    assert t["shards_rejected"] == 1
    assert res.paths == [backend.url("pcr/PCR_0.db"), backend.url("pcr/PCR_1.db")]
    assert manifest_path(out) == backend.url("pcr/PCR.manifest.json") and backend.get(
        "pcr/PCR.manifest.json"
    )
    assert verify_pcr(out, cfg) == []
    index = backend.url("pcr/" + fmt.INDEX_NAME)
    files = fmt.record_files(out, cfg)
    got = {
        key: (jpeg, label)
        for key, jpeg, label in pcr_reader.iter_pcr(files, index, 10, with_keys=True, config=cfg)
    }
    assert sorted(got) == sorted(images)
    for i, (key, src) in enumerate(images.items()):
        assert got[key][1] == i and np.array_equal(decode(got[key][0]), decode(src))
    for key, jpeg, _ in pcr_reader.iter_pcr(files, index, 1, with_keys=True, config=cfg):
        assert decode(jpeg).shape == decode(images[key]).shape and len(jpeg) < len(got[key][0])
    # no work files left behind in the bucket
    from transforms.stores import get_store

    assert not [u for u in get_store(out, cfg).list(out + "/") if ".tar2tf-work" in u]
