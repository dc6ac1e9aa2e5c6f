"""Regenerate the embedded demo shards (launch/demo/shards/*.tar).

The images are crops and rescales of the photographs scikit-image ships in its wheel; the
label ``cls`` is the index of the source photograph, and ``json`` carries the crop box.
Output is deterministic (fixed seeds, tar mtimes 0).  Run from the repo root:
``python launch/demo/make_demo.py`` (needs the ``test`` extra for scikit-image).
"""

import io
import json
import os
import tarfile

import numpy as np
from PIL import Image

PHOTOS = ("astronaut", "coffee", "chelsea", "rocket", "immunohistochemistry", "hubble_deep_field")
SHARDS, PER_SHARD, SIZE = 4, 24, (160, 120)


def main(out_dir=os.path.join(os.path.dirname(os.path.abspath(__file__)), "shards")):
    import skimage.data

    photos = [getattr(skimage.data, n)() for n in PHOTOS]
    os.makedirs(out_dir, exist_ok=True)
    rng = np.random.default_rng(2020)
    for s in range(SHARDS):
        path = os.path.join(out_dir, f"demo-{s}.tar")
        with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tf:
            for i in range(PER_SHARD):
                n = s * PER_SHARD + i
                cls = int(rng.integers(0, len(PHOTOS)))
                src = photos[cls]
                h, w = src.shape[:2]
                ch, cw = int(rng.integers(h // 2, h)), int(rng.integers(w // 2, w))
                y, x = int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1))
                img = Image.fromarray(src[y : y + ch, x : x + cw]).resize(SIZE, Image.BILINEAR)
                buf = io.BytesIO()
                img.save(buf, "JPEG", quality=85)
                meta = {"source": PHOTOS[cls], "box": [x, y, cw, ch]}
                for ext, data in (
                    ("jpg", buf.getvalue()),
                    ("cls", str(cls).encode()),
                    ("json", json.dumps(meta, sort_keys=True).encode()),
                ):
                    ti = tarfile.TarInfo(f"class{cls}/img{n:04d}.{ext}")
                    ti.size, ti.mtime, ti.mode = len(data), 0, 0o644
                    tf.addfile(ti, io.BytesIO(data))
        print(path, os.path.getsize(path))


if __name__ == "__main__":
    main()
