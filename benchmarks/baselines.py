"""Reference points for the benchmark: the hardware's limits and two other converters.

Every function here takes a :class:`benchmarks.dataset.BenchData`, a workload name and an
output directory, does the whole job, and returns ``{"images": n_written, "files": [...]}``.
The caller times it.  Workloads (identical output features in every variant):

* ``passthrough``  -- ``jpg`` bytes as read, ``cls`` as int64.
* ``resize224``    -- decode, resize to 224x224, JPEG encode (``ENCODE_QUALITY``).
* ``resize32``     -- decode, resize to 32x32, raw uint8 pixels (+ ``jpg/shape``, ``jpg/dtype``).

Variants:

* ``limit_io``     -- read every shard whole (``cat`` > /dev/null) and write its JPEG payloads
  framed as TFRecords with google-crc32c (the fastest writer measured here), one thread
  per core, each file written under a temporary name, fsync'ed and renamed: the same
  durability contract tar2tf keeps.  No tar parsing, no protobuf: the passthrough ceiling.
* ``limit_io_nosync`` -- the same without fsync: what the page cache absorbs (shown for
  reference; a converter that promises complete, durable files cannot reach it).
* ``limit_codec``  -- the codec work alone on JPEG bytes already in memory, with the fastest
  codec here, in one forked process per core (no GIL between them; the JPEGs are
  inherited, not sent): libjpeg-turbo through ``simplejpeg`` with the DCT-domain scale
  tar2tf's ``Resize`` picks (the pixels Pillow's ``draft`` gives), OpenCV's ``INTER_AREA``
  resize and ``simplejpeg``'s JPEG encode -- the library calls of tar2tf's ``numpy``
  codec, with none of its checks.  Nothing is written.  Falls back to Pillow when
  ``simplejpeg`` or OpenCV is missing.
* ``naive``        -- the original tar2tf client's approach in one process and one thread: ``tarfile`` ->
  group by key -> PIL decode/resize -> ``tf.train.Example`` -> ``tf.io.TFRecordWriter``.
  Full-size decode (no draft), as the original client did.
* ``webdataset``   -- the ``webdataset`` library reads and groups the shards, the same PIL
  ops (full-size decode: the library has no DCT-domain scaling) run in ``.map``,
  ``tf.io.TFRecordWriter`` writes; one pipeline per core on a round-robin slice of the
  shards (threads), so it gets the same cores as tar2tf.
* ``tfdata``       -- what a TensorFlow user writes without tar2tf: ``tarfile`` groups the
  members in a Python generator feeding ``tf.data``; ``tf.io.decode_jpeg`` ->
  ``tf.image.resize`` (bilinear, antialiased) -> ``tf.io.encode_jpeg`` (or raw pixels)
  run in TensorFlow's C++ kernels, ``map(num_parallel_calls=AUTOTUNE)`` over all cores;
  Examples are built in Python and written by ``tf.io.TFRecordWriter``.  Full-size decode
  (``tf.image.resize`` has no DCT-domain shortcut).  Resize workloads only.
"""

from __future__ import annotations

import io
import os
import struct
import tarfile
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Dict, List, Optional

import numpy as np
from PIL import Image

WORKLOADS = ("passthrough", "resize224", "resize32")
SIZES = {"resize224": (224, 224), "resize32": (32, 32)}
ENCODE_QUALITY = 90
RESAMPLE = Image.Resampling.BILINEAR  # transforms.ops.Resize's default method
DRAFT_GAP = 2.0  # transforms.ops.Resize's default draft_gap


def threads() -> int:
    return os.cpu_count() or 1


# -- the image ops as plain PIL, used by naive / webdataset / limit_codec ------------------


def pil_op(
    workload: str, draft_gap: Optional[float], minimal: bool = False
) -> Callable[[bytes], object]:
    """bytes -> output value (bytes for passthrough/resize224, ndarray for resize32).

    ``draft_gap``: like ``transforms.ops.Resize``: let libjpeg decode at a reduced DCT scale
    that still leaves ``draft_gap`` x the target size; None decodes at full size.
    ``minimal``: no work beyond the codec's (limit-codec): skip the original client's ``convert("RGB")``
    of an image that already is RGB, which only copies it."""
    if workload == "passthrough":
        return lambda data: data
    size = SIZES[workload]
    hint = (int(size[0] * draft_gap), int(size[1] * draft_gap)) if draft_gap else None

    def op(data: bytes):
        img = Image.open(io.BytesIO(data))
        if hint:
            img.draft("RGB", hint)
        if img.mode != "RGB" or not minimal:
            img = img.convert("RGB")  # the original client always converts (copying RGB)
        img = img.resize(size, RESAMPLE)
        if workload == "resize32":
            return np.asarray(img)
        buf = io.BytesIO()
        img.save(buf, format="JPEG", quality=ENCODE_QUALITY)
        return buf.getvalue()

    return op


def make_example(key: str, value, label: int) -> bytes:
    import tensorflow as tf

    feat = {
        "__key__": tf.train.Feature(bytes_list=tf.train.BytesList(value=[key.encode()])),
        "cls": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
    }
    if isinstance(value, np.ndarray):
        feat["jpg"] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[value.tobytes()]))
        feat["jpg/shape"] = tf.train.Feature(int64_list=tf.train.Int64List(value=list(value.shape)))
        feat["jpg/dtype"] = tf.train.Feature(
            bytes_list=tf.train.BytesList(value=[value.dtype.name.encode()])
        )
    else:
        feat["jpg"] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))
    return tf.train.Example(features=tf.train.Features(feature=feat)).SerializeToString()


# -- limit-io ------------------------------------------------------------------------------


def limit_io(data, workload: str, out: str, sync: bool = True) -> Dict:
    from transforms.tfrecord.framing import masked_crc32c

    u64, u32 = struct.Struct("<Q"), struct.Struct("<I")
    os.makedirs(out, exist_ok=True)

    def one(i: int) -> int:
        with open(data.shards[i], "rb") as f:
            buf = f.read()  # the whole shard: google-crc32c takes bytes, not memoryview slices
        path = os.path.join(out, f"limit-io-{i:05d}.tfrecord")
        with open(path + ".tmp", "wb") as w:
            for m in data.index[i]:
                payload = buf[m["offset"] : m["offset"] + m["size"]]
                head = u64.pack(m["size"])
                w.write(head)
                w.write(u32.pack(masked_crc32c(head)))
                w.write(payload)
                w.write(u32.pack(masked_crc32c(payload)))
            if sync:
                w.flush()
                os.fsync(w.fileno())
        os.replace(path + ".tmp", path)
        return len(data.index[i])

    with ThreadPoolExecutor(threads()) as pool:
        n = sum(pool.map(one, range(len(data.shards))))
    return {"images": n, "files": sorted(os.path.join(out, f) for f in os.listdir(out))}


def limit_io_nosync(data, workload: str, out: str) -> Dict:
    return limit_io(data, workload, out, sync=False)


# -- limit-codec ---------------------------------------------------------------------------


def load_jpegs(data) -> List[bytes]:
    """All JPEG payloads in memory (done before timing starts)."""
    out = []
    for path, members in zip(data.shards, data.index):
        with open(path, "rb") as f:
            buf = f.read()
        out.extend(buf[m["offset"] : m["offset"] + m["size"]] for m in members)
    return out


def _pillow_scale(w: int, h: int, hint) -> int:
    """The DCT scale (1, 2, 4 or 8) Pillow's ``draft(None, hint)`` picks for a w x h JPEG."""
    scale = min(w // hint[0], h // hint[1])
    for s in (8, 4, 2, 1):
        if scale >= s:
            return s
    return 1


def fast_op(workload: str) -> Callable[[bytes], object]:
    """:func:`pil_op` with the fastest libraries: libjpeg-turbo's TurboJPEG decode
    (``simplejpeg``) at the DCT scale tar2tf's ``Resize`` uses, OpenCV ``INTER_AREA``,
    ``simplejpeg`` encode (tar2tf's ``numpy`` codec, bare)."""
    try:
        import cv2
        import simplejpeg
    except ImportError:
        return pil_op(workload, draft_gap=DRAFT_GAP, minimal=True)
    cv2.setNumThreads(1)  # one process per core already
    size = SIZES[workload]
    hint = (int(size[0] * DRAFT_GAP), int(size[1] * DRAFT_GAP))

    def op(data: bytes):
        h, w, _, _ = simplejpeg.decode_jpeg_header(data)
        s = _pillow_scale(w, h, hint)
        arr = simplejpeg.decode_jpeg(
            data, colorspace="RGB", min_width=(w + s - 1) // s, min_height=(h + s - 1) // s
        )
        # through float32 as tar2tf's numpy codec: OpenCV's float path is faster
        small = cv2.resize(arr.astype(np.float32), size, interpolation=cv2.INTER_AREA)
        small = np.rint(small).astype(np.uint8)
        if workload == "resize32":
            return small
        return simplejpeg.encode_jpeg(
            small, quality=ENCODE_QUALITY, colorspace="RGB", colorsubsampling="420"
        )

    return op


_FORKED: Dict[str, object] = {}  # what forked limit-codec workers inherit (never pickled)


def _codec_slice(i: int) -> int:
    jpegs, workload, n = _FORKED["jpegs"], _FORKED["workload"], _FORKED["n"]
    op = fast_op(workload)
    chunk = jpegs[i::n]
    for d in chunk:
        op(d)
    return len(chunk)


def limit_codec(jpegs: List[bytes], workload: str, workers: Optional[int] = None) -> Dict:
    """The codec loop in one forked process per core; the JPEGs are inherited through fork."""
    import multiprocessing

    n = workers or threads()
    _FORKED.update(jpegs=jpegs, workload=workload, n=n)
    with multiprocessing.get_context("fork").Pool(n) as pool:
        done = sum(pool.map(_codec_slice, range(n)))
    return {"images": done, "files": []}


# -- naive: the original client's way -----------------------------------------------------------------


def naive(data, workload: str, out: str) -> Dict:
    import tensorflow as tf

    os.makedirs(out, exist_ok=True)
    op = pil_op(workload, draft_gap=None)
    path = os.path.join(out, "naive.tfrecord")
    n = 0
    with tf.io.TFRecordWriter(path) as w:
        for key, jpg, label in _tar_samples(data.shards):
            w.write(make_example(key, op(jpg), label))
            n += 1
    return {"images": n, "files": [path]}


# -- webdataset ----------------------------------------------------------------------------


def webdataset(data, workload: str, out: str) -> Dict:
    import tensorflow as tf
    import webdataset as wds

    os.makedirs(out, exist_ok=True)
    op = pil_op(workload, draft_gap=None)
    n = min(threads(), len(data.shards))

    def run(i: int) -> int:
        urls = data.shards[i::n]
        ds = wds.WebDataset(urls, shardshuffle=False, empty_check=False).map(
            lambda s: (s["__key__"], op(s["jpg"]), int(s["cls"]))
        )
        count = 0
        with tf.io.TFRecordWriter(os.path.join(out, f"wds-{i:03d}.tfrecord")) as w:
            for key, value, label in ds:
                w.write(make_example(key, value, label))
                count += 1
        return count

    with ThreadPoolExecutor(n) as pool:
        done = sum(pool.map(run, range(n)))
    return {"images": done, "files": sorted(os.path.join(out, f) for f in os.listdir(out))}


# -- tfdata: tf.data with TensorFlow's C++ codecs ----------------------------------------


def _tar_samples(shards: List[str]):
    """(key, jpeg bytes, label) per sample: a plain tarfile loop, members grouped by key."""
    for shard in shards:
        with tarfile.open(shard, "r|*") as tar:
            record: Dict[str, bytes] = {}
            key = None
            for m in tar:
                if not m.isfile():
                    continue
                k, ext = m.name.split(".", 1)
                if k != key and record:
                    yield key, record["jpg"], int(record["cls"])
                    record = {}
                key = k
                record[ext] = tar.extractfile(m).read()
            if record:
                yield key, record["jpg"], int(record["cls"])


def tfdata(data, workload: str, out: str) -> Dict:
    import tensorflow as tf

    os.makedirs(out, exist_ok=True)
    size = SIZES[workload]
    sig = (tf.TensorSpec((), tf.string), tf.TensorSpec((), tf.string), tf.TensorSpec((), tf.int64))
    ds = tf.data.Dataset.from_generator(lambda: _tar_samples(data.shards), output_signature=sig)

    def convert(key, jpg, label):
        img = tf.io.decode_jpeg(jpg, channels=3)
        img = tf.image.resize(img, (size[1], size[0]), method="bilinear", antialias=True)
        img = tf.cast(tf.clip_by_value(tf.round(img), 0, 255), tf.uint8)
        if workload == "resize224":
            img = tf.io.encode_jpeg(img, quality=ENCODE_QUALITY)
        return key, img, label

    ds = ds.map(convert, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)
    path = os.path.join(out, "tfdata.tfrecord")
    n = 0
    with tf.io.TFRecordWriter(path) as w:
        for key, value, label in ds.as_numpy_iterator():
            w.write(make_example(key.decode(), value, int(label)))
            n += 1
    return {"images": n, "files": [path]}


VARIANTS = {
    "limit-io": limit_io,
    "limit-io-nosync": limit_io_nosync,
    "naive": naive,
    "webdataset": webdataset,
    "tfdata": tfdata,
}
