"""The image codec alone: CPU time per step and quality, for each candidate library.

``python -m benchmarks.codec [--images N] [--json PATH]`` generates ``N`` images of the
benchmark set (``benchmarks.dataset.make_image``: the same JPEGs as the shards) and, on one
thread, times every step of the two resize workloads for each library that is installed:

* decode: Pillow (``Image.open`` + ``draft`` + ``load``), ``simplejpeg`` and PyTurboJPEG
  (libjpeg-turbo's TurboJPEG API, into a numpy array), at the DCT scale ``Resize`` picks;
* resize: Pillow's antialiased bilinear (tar2tf's ``pillow`` codec), OpenCV ``INTER_AREA``
  (the ``numpy`` codec), and OpenCV ``INTER_LINEAR`` (not antialiased, for reference);
* encode (224x224, quality 90): Pillow, ``simplejpeg``, PyTurboJPEG;
* both of tar2tf's codec paths end to end (``transforms.ops.images``: decode -> resize ->
  encode), with its ``pillow`` and ``numpy`` codecs.

Quality: PSNR of each resize against a reference, Pillow's Lanczos resize of the
full-size decode (float pixels, before any rounding), per image; reported as median and
minimum.  For resize224 also after the JPEG encode (the output decoded again).

CPU time is ``time.thread_time`` around each call; the candidates run interleaved per image,
so that a load change on a shared machine hits them alike; figures are medians.
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import time
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np
from PIL import Image

from benchmarks import dataset
from transforms.ops.numpy_codec import dct_scale

SIZES = {"resize224": (224, 224), "resize32": (32, 32)}
DRAFT_GAP = 2.0  # transforms.ops.Resize's default
QUALITY = 90


def _scale(w: int, h: int, size: Tuple[int, int]) -> int:
    """The DCT scale (1, 2, 4, 8) Pillow's draft picks for ``Resize``'s hint."""
    return dct_scale(w, h, (int(size[0] * DRAFT_GAP), int(size[1] * DRAFT_GAP)))


def psnr(a: np.ndarray, ref: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - ref) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)


def reference(data: bytes, size: Tuple[int, int]) -> np.ndarray:
    """Pillow Lanczos on the full-size decode, per channel in float (no rounding)."""
    img = Image.open(io.BytesIO(data)).convert("RGB")
    chans = [
        np.asarray(
            Image.fromarray(np.asarray(img)[:, :, c].astype(np.float32), "F").resize(
                size, Image.Resampling.LANCZOS
            )
        )
        for c in range(3)
    ]
    return np.stack(chans, axis=-1).astype(np.float64)


def _decoders(size) -> Dict[str, Callable[[bytes], np.ndarray]]:
    out: Dict[str, Callable[[bytes], np.ndarray]] = {}

    def pil(data):
        img = Image.open(io.BytesIO(data))
        img.draft("RGB", (int(size[0] * DRAFT_GAP), int(size[1] * DRAFT_GAP)))
        img.load()
        return img  # a Pillow image: the Pillow path resizes it without a copy

    out["pillow"] = pil
    try:
        import simplejpeg

        def sj(data):
            h, w, _, _ = simplejpeg.decode_jpeg_header(data)
            s = _scale(w, h, size)
            return simplejpeg.decode_jpeg(
                data, colorspace="RGB", min_width=-(-w // s), min_height=-(-h // s)
            )

        out["simplejpeg"] = sj
    except ImportError:
        pass
    try:
        import turbojpeg

        tj = turbojpeg.TurboJPEG()

        def pytj(data):
            w, h, _, _ = tj.decode_header(data)
            s = _scale(w, h, size)
            return tj.decode(
                data, pixel_format=turbojpeg.TJPF_RGB, scaling_factor=(1, s) if s > 1 else None
            )

        out["pyturbojpeg"] = pytj
    except (ImportError, RuntimeError, OSError):
        pass
    return out


def _resizers(size) -> Dict[str, Callable]:
    out = {
        "pillow-bilinear": lambda a: np.asarray(
            (a if isinstance(a, Image.Image) else Image.fromarray(a)).resize(
                size, Image.Resampling.BILINEAR
            )
        )
    }
    try:
        import cv2

        cv2.setNumThreads(1)
        out["opencv-area"] = lambda a: cv2.resize(a, size, interpolation=cv2.INTER_AREA)
        # what tar2tf's numpy codec runs: the same pixels, OpenCV's faster float32 path
        out["opencv-area-float32"] = lambda a: np.rint(
            cv2.resize(a.astype(np.float32), size, interpolation=cv2.INTER_AREA)
        ).astype(np.uint8)
        out["opencv-linear"] = lambda a: cv2.resize(a, size, interpolation=cv2.INTER_LINEAR)
    except ImportError:
        pass
    return out


def _encoders() -> Dict[str, Callable[[np.ndarray], bytes]]:
    def pil(a):
        buf = io.BytesIO()
        Image.fromarray(a).save(buf, "JPEG", quality=QUALITY)
        return buf.getvalue()

    out = {"pillow": pil}
    try:
        import simplejpeg

        out["simplejpeg"] = lambda a: simplejpeg.encode_jpeg(
            a, quality=QUALITY, colorspace="RGB", colorsubsampling="420"
        )
    except ImportError:
        pass
    try:
        import turbojpeg

        tj = turbojpeg.TurboJPEG()
        out["pyturbojpeg"] = lambda a: tj.encode(
            a, quality=QUALITY, pixel_format=turbojpeg.TJPF_RGB, jpeg_subsample=turbojpeg.TJSAMP_420
        )
    except (ImportError, RuntimeError, OSError):
        pass
    return out


def _timed(fn, *args):
    t = time.thread_time_ns()
    out = fn(*args)
    return out, (time.thread_time_ns() - t) / 1e6


def _tar2tf_paths(workload: str) -> Dict[str, Callable[[bytes], object]]:
    """tar2tf's own op on raw JPEG bytes, per codec (the module global switched per call)."""
    from transforms.ops import Encode, Resize, images

    size = SIZES[workload]
    op = (
        Encode(Resize("jpg", size), "jpeg", quality=QUALITY)
        if workload == "resize224"
        else Resize("jpg", size)
    )
    out = {}
    for codec in images.CODECS:

        def run(data, codec=codec):
            prev = images.CODEC
            images.CODEC = codec
            try:
                return op.value({"jpg": data})
            finally:
                images.CODEC = prev

        out[codec] = run
    return out


def measure(n: int) -> Dict:
    jpegs = [dataset.make_image(i)[0] for i in range(n)]
    result: Dict = {"images": n}
    for workload, size in SIZES.items():
        times: Dict[str, List[float]] = {}
        quality: Dict[str, List[float]] = {}
        decs, ress, encs = _decoders(size), _resizers(size), _encoders()
        paths = _tar2tf_paths(workload)
        for data in jpegs:
            ref = reference(data, size)
            decoded = {}
            for name, fn in decs.items():
                decoded[name], ms = _timed(fn, data)
                times.setdefault(f"decode {name}", []).append(ms)
            arr = decoded.get("simplejpeg")
            if arr is None:
                arr = np.asarray(decoded["pillow"].convert("RGB"))
            for name, fn in ress.items():
                src = decoded["pillow"] if name.startswith("pillow") else arr
                small, ms = _timed(fn, src)
                times.setdefault(f"resize {name}", []).append(ms)
                quality.setdefault(f"resize {name}", []).append(psnr(small, ref))
                if workload == "resize224" and name in ("pillow-bilinear", "opencv-area"):
                    small = np.ascontiguousarray(small)
                    for ename, efn in encs.items():
                        jpg, ms = _timed(efn, small)
                        if name == "opencv-area":  # one encode timing per image
                            times.setdefault(f"encode {ename}", []).append(ms)
                        back = np.asarray(Image.open(io.BytesIO(jpg)).convert("RGB"))
                        quality.setdefault(f"{name} + encode {ename}", []).append(psnr(back, ref))
            for codec, fn in paths.items():
                out, ms = _timed(fn, data)
                times.setdefault(f"tar2tf {codec} codec, whole op", []).append(ms)
                if workload == "resize224":
                    out = np.asarray(Image.open(io.BytesIO(out)).convert("RGB"))
                quality.setdefault(f"tar2tf {codec} codec, output", []).append(psnr(out, ref))
        result[workload] = {
            "cpu_ms_median": {k: round(statistics.median(v), 3) for k, v in times.items()},
            "psnr_db": {
                k: {"median": round(statistics.median(v), 2), "min": round(min(v), 2)}
                for k, v in quality.items()
            },
        }
    return result


def versions() -> Dict[str, Optional[str]]:
    import PIL

    out: Dict[str, Optional[str]] = {"pillow": PIL.__version__}
    for mod, name in (
        ("simplejpeg", "simplejpeg"),
        ("cv2", "opencv"),
        ("turbojpeg", "pyturbojpeg"),
    ):
        try:
            out[name] = __import__(mod).__version__
        except (ImportError, AttributeError):
            out[name] = None
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=200)
    ap.add_argument("--json", help="also write the results here")
    a = ap.parse_args(argv)
    res = dict(measure(a.images), versions=versions())
    text = json.dumps(res, indent=1)
    print(text)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
