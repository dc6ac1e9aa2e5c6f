"""Quality per scan group of a PCR dataset: bytes read, MS-SSIM and PSNR vs the full image.

* ``fraction``: bytes a loader reads for groups 1..k (metadata included, summed over all
  records, from the index) divided by the total size of the record files.
* ``ms_ssim`` / ``psnr_db``: on a sample of images (evenly spaced over the dataset, so the
  choice is deterministic), each decoded at level k and at the full level as RGB, compared
  with ``tf.image.ssim_multiscale`` / ``tf.image.psnr`` (max value 255).  MS-SSIM uses 5
  scales with an 11-pixel filter, which needs a shorter side of 161 pixels; smaller images
  use as many scales as fit (shorter side >= 10 * 2^(s-1) + 1), their weights (the standard
  0.0448, 0.2856, 0.3001, 0.2363, 0.1333) renormalised to sum to 1, and images with a side
  under 11 pixels are upscaled (bilinear) to 11 first.  PSNR of identical images is
  infinite: the mean is over the other images, and ``identical`` counts them.
"""

from __future__ import annotations

import json
import math
from typing import Any, Dict, List, Optional

from transforms.pcr import format as fmt
from transforms.pcr import scan_script as pcr_scan_script
from transforms.stores import StoreConfig, join

WEIGHTS = (0.0448, 0.2856, 0.3001, 0.2363, 0.1333)
FILTER = 11


def scales_for(height: int, width: int) -> int:
    side = min(height, width)
    s = 1
    while s < len(WEIGHTS) and side >= (FILTER - 1) * 2**s + 1:
        s += 1
    return s


def ms_ssim(a, b):
    """MS-SSIM of uint8 images ``a`` [N,H,W,C] (or HxWxC) vs ``b`` of the same size; see
    the module docstring for small images.  Returns a float per image."""
    import tensorflow as tf

    x, y = tf.cast(a, tf.float32), tf.cast(b, tf.float32)
    if x.shape.rank == 3:
        x, y = x[None], y[None]
    h, w = int(x.shape[1]), int(x.shape[2])
    if min(h, w) < FILTER:
        size = [max(h, FILTER), max(w, FILTER)]
        x, y = tf.image.resize(x, size), tf.image.resize(y, size)
        h, w = size
    s = scales_for(h, w)
    weights = [v / sum(WEIGHTS[:s]) for v in WEIGHTS[:s]]
    y = tf.broadcast_to(y, tf.shape(x))
    return [
        float(v)
        for v in tf.image.ssim_multiscale(x, y, 255.0, power_factors=weights, filter_size=FILTER)
    ]


def psnr(a, b):
    import tensorflow as tf

    return [
        float(v)
        for v in tf.reshape(
            tf.image.psnr(tf.cast(a, tf.float32), tf.cast(b, tf.float32), 255.0), [-1]
        )
    ]


def _sample(entries: List[fmt.RecordEntry], counts: List[int], n: int) -> Dict[int, List[int]]:
    """{record position: [image positions]} for n images evenly spaced over the dataset."""
    total = sum(counts)
    picks = sorted({i * total // n for i in range(n)}) if total > n else list(range(total))
    out: Dict[int, List[int]] = {}
    start, r = 0, 0
    for g in picks:
        while g >= start + counts[r]:
            start += counts[r]
            r += 1
        out.setdefault(r, []).append(g - start)
    return out


def report(
    directory: str, sample: int = 32, config: Optional[StoreConfig] = None
) -> Dict[str, Any]:
    import tensorflow as tf

    idx, entries_by_name = fmt.read_index(join(directory, fmt.INDEX_NAME), config)
    files = fmt.record_files(directory, config)
    entries = [fmt.lookup(entries_by_name, f) for f in files]
    groups = max((e.groups for e in entries), default=0)
    total = sum(e.size for e in entries)
    rows = [
        {
            "k": k,
            "bytes": sum(e.prefix(k) for e in entries),
            "fraction": (sum(e.prefix(k) for e in entries) / total) if total else None,
            "ms_ssim": [],
            "psnr": [],
            "identical": 0,
        }
        for k in range(1, groups + 1)
    ]
    counts = []
    metas = {}
    for f, e in zip(files, entries):
        if e.num_images is None:  # reference index: count from the metadata chunk
            metas[f] = fmt.pcr_pb2.MetadataRecord.FromString(
                fmt.read_prefix(f, e.lengths[0], config)
            )
        counts.append(e.num_images if e.num_images is not None else len(metas[f].labels))
    picked = _sample(entries, counts, sample) if sample > 0 and sum(counts) else {}
    for r, positions in sorted(picked.items()):
        e = entries[r]
        _, pieces = fmt.parse_groups(fmt.read_prefix(files[r], e.size, config), e, e.groups)
        for i in positions:
            levels = [
                tf.io.decode_jpeg(b"".join(pieces[i][:k]) + fmt.EOI, channels=3)
                for k in range(1, e.groups + 1)
            ]
            batch, full = tf.stack(levels), levels[-1][None]
            for row, m, p in zip(rows, ms_ssim(batch, full), psnr(batch, full)):
                row["ms_ssim"].append(m)
                if math.isinf(p):
                    row["identical"] += 1
                else:
                    row["psnr"].append(p)
    for row in rows:
        s, p = row.pop("ms_ssim"), row.pop("psnr")
        row["ms_ssim_mean"] = sum(s) / len(s) if s else None
        row["ms_ssim_min"] = min(s) if s else None
        row["psnr_db_mean"] = sum(p) / len(p) if p else None
    return {
        "directory": directory,
        "records": len(entries),
        "images": sum(counts),
        "sample": sum(len(v) for v in picked.values()),
        "bytes_total": total,
        "scan_groups": groups,
        "scan_script": idx.scan_script or None,
        "groups": rows,
    }


def _script_line(text: Optional[str]) -> str:
    """How the colour images were made progressive: jpegtran's standard script, or a
    custom one (its scan count and sha256, as a refused ``tar2tf pcr --resume`` names it)."""
    if not text:
        return "jpegtran's standard script"
    body = " ".join(line.split("#", 1)[0] for line in text.splitlines())
    scans = sum(1 for entry in body.split(";") if entry.strip())
    return f"custom script, {scans} scans (sha256 {pcr_scan_script.digest(text)[:12]}; colour images only)"


def format_table(rep: Dict[str, Any]) -> str:
    lines = [
        f"{rep['directory']}: {rep['images']} images in {rep['records']} records, "
        f"{rep['bytes_total']} bytes; quality on {rep['sample']} sampled images",
        f"scans: {_script_line(rep.get('scan_script'))}",
        f"{'group':>5}  {'bytes':>12}  {'fraction':>8}  {'MS-SSIM':>7}  {'min':>6}  {'PSNR dB':>7}",
    ]
    for r in rep["groups"]:

        def f(v, spec):
            return format(v, spec) if v is not None else "-"

        psnr_s = (
            f(r["psnr_db_mean"], ".2f")
            if r["psnr_db_mean"] is not None or not r["identical"]
            else "inf"
        )
        lines.append(
            f"{r['k']:>5}  {r['bytes']:>12}  {f(r['fraction'], '.4f'):>8}  "
            f"{f(r['ms_ssim_mean'], '.4f'):>7}  {f(r['ms_ssim_min'], '.4f'):>6}  {psnr_s:>7}"
        )
    return "\n".join(lines)


def plot(rep: Dict[str, Any], path: str) -> None:
    """PNG: bytes fraction and MS-SSIM (left axis, 0..1) and PSNR (right axis) per group."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ks = [r["k"] for r in rep["groups"]]
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=100)
    ax.bar(
        ks,
        [r["fraction"] or 0 for r in rep["groups"]],
        color="#9ecae1",
        label="fraction of bytes read",
    )

    def column(name):  # a group with no figure is a gap in the line
        return [float("nan") if r[name] is None else r[name] for r in rep["groups"]]

    ax.plot(
        ks,
        column("ms_ssim_mean"),
        "o-",
        color="#08519c",
        label="mean MS-SSIM vs full",
    )
    ax.set_xlabel("scan groups read (k)")
    ax.set_ylim(0, 1.05)
    ax.set_xticks(ks)
    ax2 = ax.twinx()
    ax2.plot(
        ks,
        column("psnr_db_mean"),
        "s--",
        color="#d94801",
        label="mean PSNR (dB)",
    )
    ax2.set_ylabel("PSNR (dB)")
    lines = ax.get_legend_handles_labels()
    lines2 = ax2.get_legend_handles_labels()
    ax.legend(lines[0] + lines2[0], lines[1] + lines2[1], loc="lower right", fontsize=8)
    ax.set_title(f"PCR quality per scan group ({rep['sample']} of {rep['images']} images)")
    fig.tight_layout()
    fig.savefig(path, format="png", metadata={"Software": None})
    plt.close(fig)


def save(rep: Dict[str, Any], json_path: str, png_path: str) -> None:
    with open(json_path, "w") as f:
        json.dump(rep, f, indent=1, sort_keys=True)
        f.write("\n")
    plot(rep, png_path)
