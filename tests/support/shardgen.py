"""Test data made on the fly: real-photo JPEG/PNG crops and tar shards.

Images are crops and rescales of the photographs scikit-image ships in its wheel
(astronaut, coffee, chelsea, rocket...), so they compress like real data.  Everything is
a pure function of its arguments (seeded), so tests are reproducible.
"""

from __future__ import annotations

import io
import os
import tarfile
from typing import Iterable, List, Tuple

import numpy as np
from PIL import Image

_PHOTOS = ("astronaut", "coffee", "chelsea", "rocket", "immunohistochemistry", "hubble_deep_field")
_cache = {}


def photo(index: int) -> np.ndarray:
    """One of the shipped RGB photographs (uint8 HxWx3)."""
    name = _PHOTOS[index % len(_PHOTOS)]
    if name not in _cache:
        import skimage.data

        arr = getattr(skimage.data, name)()
        if arr.ndim == 2:
            arr = np.stack([arr] * 3, axis=-1)
        _cache[name] = np.ascontiguousarray(arr[..., :3])
    return _cache[name]


def image_array(seed: int, size: Tuple[int, int] = (64, 48)) -> np.ndarray:
    """A deterministic crop of a real photo, resized to ``size`` = (width, height)."""
    rng = np.random.default_rng(seed)
    src = photo(int(rng.integers(0, len(_PHOTOS))))
    h, w = src.shape[:2]
    ch = int(rng.integers(h // 3, h))
    cw = int(rng.integers(w // 3, w))
    y = int(rng.integers(0, h - ch + 1))
    x = int(rng.integers(0, w - cw + 1))
    crop = Image.fromarray(src[y : y + ch, x : x + cw])
    return np.asarray(crop.resize(size, Image.BILINEAR))


def encode(arr: np.ndarray, fmt: str = "JPEG", **kw) -> bytes:
    buf = io.BytesIO()
    img = Image.fromarray(arr)
    if fmt.upper() in ("JPEG", "JPG"):
        kw.setdefault("quality", 90)
        fmt = "JPEG"
    img.save(buf, format=fmt, **kw)
    return buf.getvalue()


def jpeg(seed: int, size=(64, 48), quality: int = 90) -> bytes:
    return encode(image_array(seed, size), "JPEG", quality=quality)


def png(seed: int, size=(64, 48)) -> bytes:
    return encode(image_array(seed, size), "PNG")


def write_tar(
    path: str, members: Iterable[Tuple[str, bytes]], gz: bool = False, fmt=tarfile.GNU_FORMAT
) -> str:
    """Write members in the given order; mtime 0 and fixed ownership for determinism."""
    mode = "w:gz" if gz else "w"
    with tarfile.open(path, mode, format=fmt) as tf:
        _add(tf, members)
    return path


def tar_bytes(members: Iterable[Tuple[str, bytes]], fmt=tarfile.GNU_FORMAT) -> bytes:
    """:func:`write_tar`'s archive as bytes, for a test that reads it from memory."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tf:
        _add(tf, members)
    return buf.getvalue()


def _add(tf: tarfile.TarFile, members: Iterable[Tuple[str, bytes]]) -> None:
    for name, data in members:
        ti = tarfile.TarInfo(name)
        ti.size = len(data)
        ti.mtime = 0
        ti.mode = 0o644
        ti.uname = ti.gname = "tar2tf"
        tf.addfile(ti, io.BytesIO(data))


def sample_members(
    start: int, count: int, size=(64, 48), prefix: str = "", ext: str = "jpg"
) -> List[Tuple[str, bytes]]:
    """``count`` records: ``{prefix}{i:06d}.jpg`` + ``.cls`` (label i % 10)."""
    out = []
    for i in range(start, start + count):
        img = jpeg(i, size) if ext == "jpg" else png(i, size)
        out.append((f"{prefix}{i:06d}.{ext}", img))
        out.append((f"{prefix}{i:06d}.cls", str(i % 10).encode()))
    return out


def make_shards(
    directory: str,
    n_shards: int,
    per_shard: int,
    size=(64, 48),
    gz: bool = False,
    name: str = "train-{:04d}.tar",
) -> List[str]:
    import os

    os.makedirs(directory, exist_ok=True)
    paths = []
    for s in range(n_shards):
        p = os.path.join(
            directory, name.format(s) + (".gz" if gz and not name.endswith("gz") else "")
        )
        write_tar(p, sample_members(s * per_shard, per_shard, size), gz=gz)
        paths.append(p)
    return paths


def bad_inputs(d: str):
    """Input shards of every kind of damage beside a good one (a file that is no tar, a
    truncated tar, a gzip cut short, bad members, a missing shard); their two sources."""
    os.makedirs(d, exist_ok=True)
    write_tar(f"{d}/s-0.tar", sample_members(0, 5))  # good
    open(f"{d}/s-1.tar", "wb").write(b"not a tar" * 100)  # not a tar
    full = open(write_tar(f"{d}/full.tar", sample_members(5, 5)), "rb").read()
    open(f"{d}/s-2.tar", "wb").write(full[: len(full) - 3000])  # truncated
    gz = open(write_tar(f"{d}/full.tgz", sample_members(10, 30), gz=True), "rb").read()
    open(f"{d}/s-3.tar.gz", "wb").write(gz[: len(gz) // 2])  # gzip cut short
    write_tar(
        f"{d}/s-4.tar",
        [
            ("a.jpg", b"A"),
            ("a.cls", b"1"),
            ("b.jpg", b""),
            ("b.cls", b"2"),
            ("c.jpg", b"C" * 5000),
            ("d.cls", b"4"),
            ("d.cls", b"dup"),
            ("e.cls", b"not-an-int"),
        ],
    )
    os.unlink(f"{d}/full.tar")
    os.unlink(f"{d}/full.tgz")
    return f"{d}/s-{{0..5}}.tar", f"{d}/s-3.tar.gz"  # s-5 missing
