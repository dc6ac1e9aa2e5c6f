"""Ratios, target checks and the Markdown tables for benchmark results.

"tar2tf" in the targets is ``tar2tf-default``, what ``tar2tf convert`` runs with no runner
flag; ``tar2tf-beam`` (``--runner beam``: FnApiRunner, ``multi_processing``, one process
per core) is measured against it.  Every tar2tf variant gets the ratios to every peer and
limit, named ``<variant>/<peer>``.
"""

from __future__ import annotations

from typing import Dict, List, Optional

from benchmarks import variants

LIMIT = {"passthrough": "limit-io", "resize224": "limit-codec", "resize32": "limit-codec"}
WORKLOAD_TITLE = {
    "passthrough": "passthrough (no decode)",
    "resize224": "decode -> resize 224 -> JPEG q90",
    "resize32": "decode -> resize 32 (raw pixels)",
}
PEERS = ("naive", "webdataset", "tfdata")
MAIN = "tar2tf-default"
BEAM = "tar2tf-beam"
PILLOW = "tar2tf-pillow"
# (workload, peer, bound): the default command's speed / the peer's must be >= bound
SPEED_TARGETS = (
    ("passthrough", "limit-io", 1.3),
    ("resize224", "naive", 3.0),
    ("resize32", "naive", 5.0),
    ("resize224", "tfdata", 4.0),
    ("resize32", "tfdata", 4.0),
    ("resize224", "limit-codec", 0.9),
    ("resize32", "limit-codec", 0.9),
)
MEMORY_BOUND = 1.2  # peak RSS of the process tree at 4x the images / at 1x
# (workload, bound): `--runner beam`'s throughput / the default command's
BEAM_TARGETS = (("resize224", 0.8),)


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def codec_info() -> Dict:
    """The default image codec and its libraries' versions (transforms/ops/images.py)."""
    import PIL

    from transforms.ops import images

    info = {"default": images.CODEC, "pillow": PIL.__version__}
    for mod, name in (("simplejpeg", "simplejpeg"), ("cv2", "opencv")):
        try:
            info[name] = __import__(mod).__version__
        except (ImportError, AttributeError):
            info[name] = None
    return info


def _by(rows: List[Dict], wl: str) -> Dict[str, Dict]:
    return {r["variant"]: r for r in rows if r["workload"] == wl and r.get("ok")}


# same-run comparisons between tar2tf variants: (numerator, denominator)
PAIRS = ((BEAM, MAIN), (MAIN, PILLOW), (BEAM, "tar2tf-inprocess"))


def ratios(rows: List[Dict]) -> Dict[str, Dict]:
    """Per workload and tar2tf variant: its speed over each peer's and the limit's."""
    out: Dict[str, Dict] = {}
    for wl in LIMIT:
        by = _by(rows, wl)
        r: Dict[str, float] = {}
        for drv in variants.TAR2TF:
            if drv not in by:
                continue
            speed = by[drv]["images_per_s"]
            for ref in PEERS + (LIMIT[wl],):
                if ref in by:
                    r[f"{drv}/{ref}"] = speed / by[ref]["images_per_s"]
        for a, b in PAIRS:
            if a in by and b in by:
                r[f"{a}/{b}"] = by[a]["images_per_s"] / by[b]["images_per_s"]
        if r:
            out[wl] = r
    return out


def _check(value: Optional[float], op: str, bound: float) -> Dict:
    if value is None:
        return {"value": None, "bound": f"{op} {bound}", "met": None}
    met = value >= bound if op == ">=" else value <= bound
    return {"value": round(value, 3), "bound": f"{op} {bound}", "met": met}


def targets(result: Dict) -> Dict[str, Dict]:
    rt = result.get("ratios", {})
    t: Dict[str, Dict] = {}
    for wl, peer, bound in SPEED_TARGETS:
        t[f"{wl}: {MAIN} / {peer}"] = _check(rt.get(wl, {}).get(f"{MAIN}/{peer}"), ">=", bound)
    for wl, bound in BEAM_TARGETS:
        t[f"{wl}: {BEAM} / {MAIN}"] = _check(rt.get(wl, {}).get(f"{BEAM}/{MAIN}"), ">=", bound)
    for s in result.get("scaling") or []:
        if "rss_ratio_4x" in s:
            t[f"memory, {s['workload']}: {s['variant']} peak RSS 4x / 1x"] = _check(
                s["rss_ratio_4x"], "<=", MEMORY_BOUND
            )
    return t


def _f(v, fmt="{:.2f}"):
    return "-" if v is None else fmt.format(v)


SUMMARY = (MAIN, BEAM, PILLOW, "naive", "webdataset", "tfdata")


def summary(result: Dict) -> List[str]:
    """The short table: seconds per workload for the default command, `--runner beam`, the
    pillow codec, the peers and the limit."""
    lines = [
        "| workload | tar2tf (default) | tar2tf --runner beam | tar2tf, pillow codec | naive "
        "| webdataset | tfdata | limit |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for wl in LIMIT:
        by = _by(result["rows"], wl)
        if not by:
            continue
        cells = [
            _f(by[v]["seconds"], "{:.1f} s") if v in by else "-" for v in SUMMARY + (LIMIT[wl],)
        ]
        lines.append(f"| {WORKLOAD_TITLE[wl]} | " + " | ".join(cells) + " |")
    return lines + [""]


def _scaling_lines(sc: List[Dict], result: Dict) -> List[str]:
    if not sc:
        return []
    d = result["dataset"]
    lines = [
        f"**Scaling** (1x = a quarter of the shards, {d['shards'] // 4}; 4x = all {d['shards']}; "
        "speed-up = 1x time with 1 worker / with 2; growth = 4x time / 1x time, both with 2 workers):",
        "",
        "| workload | driver | 1x, 1 worker | 1x, 2 workers | 4x, 2 workers | speed-up 2 workers "
        "| time 4x / 1x | peak RSS MB 1x / 4x | RSS 4x / 1x |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in sc:
        if "error" in s:
            lines.append(
                f"| {s['workload']} | {s['variant']} | failed: {str(s['error'])[-80:]!r} | | | | | | |"
            )
            continue
        lines.append(
            f"| {s['workload']} | {s['variant']} | {s['seconds_1x_1w']:.1f} s "
            f"({s['images_per_s_1x_1w']:.0f}/s) | {s['seconds_1x_2w']:.1f} s "
            f"({s['images_per_s_1x_2w']:.0f}/s) | {s['seconds_4x_2w']:.1f} s "
            f"({s['images_per_s_4x_2w']:.0f}/s) | {s['speedup_2w']:.2f} | {s['time_ratio_4x']:.2f} | "
            f"{s['rss_1x_2w_mb']:.0f} / {s['rss_4x_2w_mb']:.0f} | {s['rss_ratio_4x']:.2f} |"
        )
    return lines + [""]


def _codec_text(c: Dict) -> str:
    if not c:
        return "?"
    if "default" not in c:  # results of a version before the numpy codec
        return str(c.get("jpeg_decode"))
    return (
        f"{c['default']} by default (simplejpeg {c.get('simplejpeg')}, OpenCV {c.get('opencv')}; "
        f"Pillow {c.get('pillow')})"
    )


def markdown(result: Dict) -> str:
    m, d = result["machine"], result["dataset"]
    l0, l1 = m.get("loadavg_start"), m.get("loadavg_end")
    lines = [
        f"### tar2tf benchmark, size `{result['size']}` ({result['date']})",
        "",
        f"Machine: {m['cores']} cores, {m['cpu']}, Python {m['python']}; load average (1 min) "
        f"{_f(l0 and l0[0], '{:.1f}')} at the start and {_f(l1 and l1[0], '{:.1f}')} at the end.  "
        f"Data: {d['images']} JPEGs (mean {d['mean_jpeg_kb']:.1f} kB) in {d['shards']} tar shards, "
        f"{d['tar_mb']:.1f} MB.  Image codec in tar2tf: {_codec_text(result.get('codec', {}))}.  "
        f"Median of {result['repeat']} run(s); MB/s = tar input bytes per second; CPU ms/image = "
        f"CPU time of the timed region (all threads and worker processes) per image; peak RSS = peak "
        f"of the summed RSS of the variant's process tree; other load = cores other processes kept "
        f"busy meanwhile.  Every run's output was verified.",
        "",
    ]
    lines += summary(result)
    order = {v: i for i, v in enumerate(variants.ALL)}
    for wl in LIMIT:
        rows = [r for r in result["rows"] if r["workload"] == wl]
        if not rows:
            continue
        lines += [
            f"**{WORKLOAD_TITLE[wl]}**",
            "",
            "| variant | images/s | MB/s | seconds | CPU ms/image | peak RSS MB | output MB | other load |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in sorted(rows, key=lambda r: order.get(r["variant"], 99)):
            if not r.get("images_per_s"):
                lines.append(
                    f"| {r['variant']} | failed: {str(r.get('error', ''))[-80:]!r} | | | | | | |"
                )
                continue
            flag = "" if r["ok"] else " (some runs FAILED)"
            lines.append(
                f"| {r['variant']}{flag} | {r['images_per_s']:.1f} | {r['mb_per_s']:.1f} | "
                f"{r['seconds']:.2f} | {r['cpu_ms_per_image']:.2f} | {r['peak_rss_mb']:.0f} | "
                f"{r['out_mb']:.1f} | {r['other_load']:.2f} |"
            )
        rt = result.get("ratios", {}).get(wl)
        if rt:
            lines += [
                "",
                "Ratios (speed over speed): " + ", ".join(f"{k} = {v:.2f}" for k, v in rt.items()),
            ]
        lines.append("")
    lines += _scaling_lines(result.get("scaling") or [], result)
    if result.get("pcr"):
        lines += _pcr_lines(result["pcr"])
    lines += ["**Targets**", "", "| target | value | bound | met |", "|---|---:|---|---|"]
    for name, t in result.get("targets", {}).items():
        met = {True: "yes", False: "**no**", None: "not measured"}[t["met"]]
        lines.append(f"| {name} | {_f(t['value'], '{:.3f}')} | {t['bound']} | {met} |")
    lines.append("")
    return "\n".join(lines)


def _pcr_lines(pcr: Dict) -> List[str]:
    if pcr.get("missing"):
        return [f"**PCR**: not measured ({pcr['missing']})", ""]
    if pcr.get("error"):
        return [f"**PCR**: failed: {pcr['error'][-300:]}", ""]
    runner = " ".join(pcr.get("beam_args", [])) or "tar2tf's default local runner, no runner flags"
    out = [
        f"**PCR** convert ({runner}): {pcr['images']} images in "
        f"{pcr['convert_seconds']:.2f} s ({pcr['images'] / pcr['convert_seconds']:.1f} images/s), "
        f"{pcr['records']} records, {pcr['bytes_total'] / 1e6:.1f} MB written "
        f"({pcr['bytes_total'] / pcr['source_jpeg_bytes']:.3f} x the source JPEG bytes), "
        f"peak RSS {pcr.get('peak_rss', 0) / 1e6:.0f} MB.",
        "",
        "| scan groups | bytes read | fraction of all groups | fraction of source JPEGs | exactly the prefix "
        "| read images/s | read + decode images/s |",
        "|---|---:|---:|---:|---|---:|---:|",
    ]
    for lv in pcr.get("load", []):
        out.append(
            f"| {lv['groups']} | {lv['bytes']:,} | {lv['fraction']:.3f} | {lv['fraction_of_source']:.3f} | "
            f"{'yes' if lv['exact_prefix'] else '**no**'} | {lv['images'] / lv['seconds']:.0f} | "
            f"{lv['images'] / lv['decode_seconds']:.0f} |"
        )
    out.append("")
    return out
