"""A deterministic, ImageNet-like benchmark dataset written as WebDataset tar shards.

Images are crops, flips and rescales of the photographs scikit-image ships in its wheel
(half of them 2x2 collages of four crops, for busier scenes; no noise: noise compresses
unrealistically), encoded as baseline JPEG at quality 90 in ImageNet's common sizes
(mostly 500x375).  Each sample is ``<key>.jpg`` + ``<key>.cls``
(label = source photo index).  Everything is a pure function of ``(size, seed)``, so two
machines generate identical bytes; a finished dataset is cached on disk and reused.

``python -m benchmarks.dataset --size quick|full [--dir D]`` builds (or finds) it.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import io
import json
import os
import sys
import tarfile
from concurrent.futures import ProcessPoolExecutor
from typing import Dict, List, Tuple

import numpy as np
from PIL import Image

# Colour (and one grey) photographs in scikit-image's wheel, including three texture
# photographs (brick, grass, gravel) that bring the high-frequency detail camera JPEGs have.
PHOTOS = (
    "astronaut",
    "coffee",
    "chelsea",
    "rocket",
    "immunohistochemistry",
    "hubble_deep_field",
    "retina",
    "camera",
    "brick",
    "grass",
    "gravel",
)
# (width, height) and weight: the usual ImageNet shapes around 500x375
SHAPES = (
    ((500, 375), 0.55),
    ((500, 333), 0.2),
    ((375, 500), 0.15),
    ((500, 500), 0.05),
    ((333, 500), 0.05),
)
QUALITY = 90
COLLAGE = 0.5  # share of images that are 2x2 collages of four crops (busier scenes)
FORMAT_VERSION = 2


@dataclasses.dataclass(frozen=True)
class Size:
    name: str
    shards: int
    per_shard: int

    @property
    def images(self) -> int:
        return self.shards * self.per_shard


# full: 20,480 images in 64 shards (~17 MB each, ~1.1 GB): long enough that a conversion's
# fixed per-job costs (Beam's graph, worker start-up) do not decide the ratios.  The
# scaling checks use a quarter of the shards as their 1x size.
SIZES = {"quick": Size("quick", 4, 24), "full": Size("full", 64, 320)}


def default_root() -> str:
    cache = os.environ.get("TAR2TF_CACHE") or os.path.expanduser("~/.cache/tar2tf")
    return os.path.join(cache, "bench-data")


_photos: Dict[str, np.ndarray] = {}


def photo(name: str) -> np.ndarray:
    if name not in _photos:
        import skimage.data

        arr = getattr(skimage.data, name)()
        if arr.ndim == 2:
            arr = np.stack([arr] * 3, axis=-1)
        _photos[name] = np.ascontiguousarray(arr[..., :3])
    return _photos[name]


def _crop(
    rng: np.random.Generator, src: np.ndarray, w: int, h: int, min_scale: float
) -> Image.Image:
    """A random crop of ``src`` with aspect w:h (55..100 % of the largest one), flipped
    half the time, rescaled to w x h."""
    sh, sw = src.shape[:2]
    aspect = w / h
    cw_max, ch_max = (sw, int(sw / aspect)) if sw / sh <= aspect else (int(sh * aspect), sh)
    scale = float(rng.uniform(min_scale, 1.0))
    cw, ch = max(8, int(cw_max * scale)), max(8, int(ch_max * scale))
    x = int(rng.integers(0, sw - cw + 1))
    y = int(rng.integers(0, sh - ch + 1))
    crop = Image.fromarray(src[y : y + ch, x : x + cw])
    if rng.random() < 0.5:
        crop = crop.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return crop.resize((w, h), Image.Resampling.LANCZOS)


def make_image(index: int, seed: int = 0) -> Tuple[bytes, int]:
    """JPEG bytes and label of image ``index``: one crop of a photo, or (COLLAGE of the
    time) a 2x2 collage of four crops; label = index of the (first) photo."""
    rng = np.random.default_rng([seed, index])
    shapes, weights = zip(*SHAPES)
    w, h = shapes[int(rng.choice(len(shapes), p=np.array(weights) / sum(weights)))]
    label = int(rng.integers(0, len(PHOTOS)))
    if rng.random() >= COLLAGE:
        img = _crop(rng, photo(PHOTOS[label]), w, h, 0.55)
    else:
        img = Image.new("RGB", (w, h))
        tiles = (
            (0, 0, w // 2, h // 2),
            (w // 2, 0, w, h // 2),
            (0, h // 2, w // 2, h),
            (w // 2, h // 2, w, h),
        )
        for n, (x0, y0, x1, y1) in enumerate(tiles):
            src = PHOTOS[label] if n == 0 else PHOTOS[int(rng.integers(0, len(PHOTOS)))]
            img.paste(_crop(rng, photo(src), x1 - x0, y1 - y0, 0.3), (x0, y0))
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=QUALITY)
    return buf.getvalue(), label


def _add(tf: tarfile.TarFile, name: str, data: bytes):
    ti = tarfile.TarInfo(name)
    ti.size, ti.mtime, ti.mode = len(data), 0, 0o644
    ti.uname = ti.gname = "tar2tf"
    tf.addfile(ti, io.BytesIO(data))


@dataclasses.dataclass
class BenchData:
    """A built dataset: shard paths plus the facts baselines need (member offsets)."""

    directory: str
    size: Size
    shards: List[str]
    index: List[List[Dict]]  # per shard: [{key, offset, size, label}] of the .jpg members

    @property
    def images(self) -> int:
        return sum(len(s) for s in self.index)

    @property
    def tar_bytes(self) -> int:
        return sum(os.path.getsize(p) for p in self.shards)

    @property
    def jpeg_bytes(self) -> int:
        return sum(m["size"] for s in self.index for m in s)

    def subset(self, n_shards: int) -> "BenchData":
        return BenchData(self.directory, self.size, self.shards[:n_shards], self.index[:n_shards])

    def template(self) -> str:
        return os.path.join(self.directory, "train-{%04d..%04d}.tar" % (0, len(self.shards) - 1))


def _write_shard(d: str, s: int, spec: Size, seed: int) -> Dict:
    """Write shard ``s`` (atomically) and return its index entry; runs in a worker process."""
    name = f"train-{s:04d}.tar"
    members = []
    tmp = os.path.join(d, name + ".tmp")
    with tarfile.open(tmp, "w", format=tarfile.GNU_FORMAT) as tf:
        for i in range(s * spec.per_shard, (s + 1) * spec.per_shard):
            data, label = make_image(i, seed)
            key = f"n{label:08d}_{i:07d}"
            _add(tf, key + ".jpg", data)
            members.append({"key": key, "size": len(data), "label": label})
            _add(tf, key + ".cls", str(label).encode())
    with tarfile.open(tmp) as tf:  # payload offsets, for limit-io and limit-codec
        offs = {m.name: m.offset_data for m in tf.getmembers()}
    for m in members:
        m["offset"] = offs[m["key"] + ".jpg"]
    with open(tmp, "rb") as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest()
    os.replace(tmp, os.path.join(d, name))
    return {"name": name, "members": members, "sha256": digest}


def build(size: str = "quick", root: str = None, seed: int = 0, log=None) -> BenchData:
    """Build the dataset (or reuse a finished one: ``index.json`` is written last)."""
    spec = SIZES[size]
    d = os.path.join(
        root or default_root(),
        f"{spec.name}-{spec.shards}x{spec.per_shard}-s{seed}-v{FORMAT_VERSION}",
    )
    done = os.path.join(d, "index.json")
    if os.path.exists(done):
        with open(done) as f:
            meta = json.load(f)
        return BenchData(d, spec, [os.path.join(d, s) for s in meta["shards"]], meta["index"])
    os.makedirs(d, exist_ok=True)
    # every image is a pure function of (seed, index): shards are built in parallel processes
    with ProcessPoolExecutor(min(spec.shards, os.cpu_count() or 1)) as pool:
        futures = [pool.submit(_write_shard, d, s, spec, seed) for s in range(spec.shards)]
        shards = []
        for n, fut in enumerate(futures):
            shards.append(fut.result())
            if log:
                log(f"dataset {size}: shard {n + 1}/{spec.shards}")
    meta = {
        "size": dataclasses.asdict(spec),
        "seed": seed,
        "format": FORMAT_VERSION,
        "shards": [s["name"] for s in shards],
        "sha256": [s["sha256"] for s in shards],
        "index": [s["members"] for s in shards],
    }
    with open(done + ".tmp", "w") as f:
        json.dump(meta, f)
    os.replace(done + ".tmp", done)
    return build(size, root, seed)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", choices=sorted(SIZES), default="quick")
    ap.add_argument("--dir", default=None, help=f"root directory (default {default_root()})")
    a = ap.parse_args(argv)
    data = build(a.size, a.dir, log=lambda m: print(m, file=sys.stderr))
    print(
        json.dumps(
            {
                "dir": data.directory,
                "shards": len(data.shards),
                "images": data.images,
                "tar_MB": round(data.tar_bytes / 1e6, 1),
                "mean_jpeg_KB": round(data.jpeg_bytes / data.images / 1e3, 1),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
