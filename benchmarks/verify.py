"""Checks that a benchmark variant's output is right (run after the clock stops).

A speed figure only counts if the output is complete and valid, so every measured run
is verified: all records present exactly once (keys = the dataset's keys), every frame's
CRC valid, every record a parseable ``tf.train.Example`` with the expected features,
labels equal to the source labels, and the image values what the workload promises:

* passthrough -- the JPEG bytes identical to the source member;
* resize224   -- a JPEG that decodes to 224x224 RGB (checked on a sample of records);
* resize32    -- a 32x32x3 uint8 array (raw bytes + ``/shape`` + ``/dtype``).

``limit-io`` writes bare JPEG payloads (no Example): their bytes are compared in order.
Returns None when everything holds, else a one-line reason.
"""

from __future__ import annotations

import io
from typing import Dict, List, Optional

import numpy as np

IMAGE_SAMPLE = 48  # resize224 records whose JPEG is decoded to check its size


class _Source:
    """The dataset's JPEG payloads by key, read on demand (verification must not hold the
    whole dataset in memory: the worker's peak RSS is part of the measurement)."""

    def __init__(self, data):
        self.where = {}
        for path, members in zip(data.shards, data.index):
            for m in members:
                self.where[m["key"]] = (path, m["offset"], m["size"], m["label"])
        self._files: Dict[str, object] = {}

    def __contains__(self, key):
        return key in self.where

    def __len__(self):
        return len(self.where)

    def label(self, key: str) -> int:
        return self.where[key][3]

    def jpeg(self, key: str) -> bytes:
        path, offset, size, _ = self.where[key]
        f = self._files.get(path)
        if f is None:
            f = self._files[path] = open(path, "rb")
        f.seek(offset)
        return f.read(size)

    def close(self):
        for f in self._files.values():
            f.close()


def _frames(files: List[str]):
    from transforms.tfrecord.framing import read_records

    for path in files:
        yield from read_records(path, check_crc=True)


def verify_limit_io(data, files: List[str]) -> Optional[str]:
    src = _Source(data)
    try:
        keys = [m["key"] for members in data.index for m in members]
        n = 0
        for payload in _frames(sorted(files)):
            if n >= len(keys):
                return f"more records written than the {len(keys)} images"
            if payload != src.jpeg(keys[n]):
                return f"record {n} differs from the source JPEG {keys[n]}"
            n += 1
        return None if n == len(keys) else f"{n} records written, {len(keys)} expected"
    finally:
        src.close()


def verify_examples(
    data, files: List[str], workload: str, value: str = "jpg", label: str = "cls"
) -> Optional[str]:
    """Example records in ``files`` against the dataset (see the module docstring)."""
    src = _Source(data)
    try:
        return _check_examples(src, files, workload, value, label)
    finally:
        src.close()


def _check_examples(
    src: "_Source", files: List[str], workload: str, value: str, label: str
) -> Optional[str]:
    from PIL import Image

    from transforms.tfrecord.example import parse_example

    seen = set()
    decoded = 0
    for payload in _frames(files):
        rec = parse_example(payload)
        key = rec.get("__key__")
        if key not in src:
            return f"unknown or missing __key__ {key!r}"
        if key in seen:
            return f"key {key!r} written twice"
        seen.add(key)
        want_label = src.label(key)
        got_label = rec.get(label)
        if isinstance(got_label, (bytes, bytearray)):
            got_label = int(got_label)
        if got_label is None or int(np.asarray(got_label).reshape(-1)[0]) != want_label:
            return f"{key}: label {got_label!r} != {want_label}"
        v = rec.get(value)
        if workload == "passthrough":
            if v != src.jpeg(key):
                return f"{key}: passthrough bytes differ from the source JPEG"
        elif workload == "resize32":
            if not isinstance(v, np.ndarray) or v.shape != (32, 32, 3) or v.dtype != np.uint8:
                return f"{key}: expected a 32x32x3 uint8 array, got {getattr(v, 'shape', type(v).__name__)}"
        elif workload == "resize224":
            if not isinstance(v, (bytes, bytearray)) or v[:2] != b"\xff\xd8":
                return f"{key}: expected JPEG bytes"
            if decoded < IMAGE_SAMPLE:
                decoded += 1
                with Image.open(io.BytesIO(v)) as im:
                    if im.size != (224, 224) or im.mode != "RGB":
                        return f"{key}: JPEG is {im.size} {im.mode}, expected (224, 224) RGB"
    if len(seen) != len(src):
        return f"{len(seen)} of {len(src)} records written"
    return None


def verify_manifest(manifest: Dict, images: int) -> Optional[str]:
    """tar2tf's own accounting: read = written + rejected + filtered, nothing lost."""
    t = manifest["totals"]
    if t["records_read"] != t["records_written"] + t["records_rejected"] + t["records_filtered"]:
        return f"manifest totals do not add up: {t}"
    if t["records_written"] != images or t["records_rejected"] or t["shards_rejected"]:
        return f"manifest: {t['records_written']} written of {images}, {t['records_rejected']} rejected"
    return None
