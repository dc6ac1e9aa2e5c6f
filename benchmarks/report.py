"""Ratios, target checks and the Markdown tables for benchmark results."""

from __future__ import annotations

from typing import Dict, List, Optional

from benchmarks import variants

LIMIT = {"passthrough": ("limit-io",), "resize224": variants.LIMIT_CODEC, "resize32": variants.LIMIT_CODEC}
WORKLOAD_TITLE = {"passthrough": "passthrough (no decode)", "resize224": "decode -> resize 224 -> JPEG q90",
                  "resize32": "decode -> resize 32 (raw pixels)"}
REFS = (("naive", "naive"), ("webdataset", "webdataset"))


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def _by(rows: List[Dict], wl: str) -> Dict[str, Dict]:
    return {r["variant"]: r for r in rows if r["workload"] == wl and r.get("ok")}


def best_tar2tf(rows: List[Dict], wl: str) -> Optional[Dict]:
    got = [r for v, r in _by(rows, wl).items() if v in variants.BEAM_MODES]
    return max(got, key=lambda r: r["images_per_s"]) if got else None


def best_load(by: Dict[str, Dict]) -> Optional[str]:
    """The in-process driver's faster mode (a thread per core, or one thread) among ``by``."""
    got = [v for v in variants.LOAD if v in by]
    return max(got, key=lambda v: by[v]["images_per_s"]) if got else None


def limit_of(rows: List[Dict], wl: str) -> Optional[str]:
    """The workload's limit variant: for the codec, the faster of threads and processes."""
    by = _by(rows, wl)
    got = [v for v in LIMIT[wl] if v in by]
    return max(got, key=lambda v: by[v]["images_per_s"]) if got else None


def ratios(rows: List[Dict]) -> Dict[str, Dict]:
    """Per workload: the best Beam mode ("tar2tf") against naive, webdataset and the limit;
    the in-process ``Dataset.load`` in its faster mode ("tar2tf-load", named in
    ``load_variant``) against naive and the limit too."""
    out = {}
    for wl in LIMIT:
        by = _by(rows, wl)
        best = best_tar2tf(rows, wl)
        if best is None:
            continue
        speed = best["images_per_s"]
        limit = limit_of(rows, wl)
        r = {"tar2tf_variant": best["variant"], "tar2tf_images_per_s": speed, "limit_variant": limit}
        for name, ref in REFS + (("limit", limit),):
            if ref in by:
                r[f"tar2tf/{name}"] = speed / by[ref]["images_per_s"]
        if wl == "passthrough" and "limit-io-nosync" in by:
            r["tar2tf/limit-io-nosync"] = speed / by["limit-io-nosync"]["images_per_s"]
        load = best_load(by)
        if load is not None:
            r["load_variant"] = load
        for name, v in (("tar2tf-load", load),) + tuple((s, s) for s in variants.STREAM):
            if v in by and "naive" in by:
                r[f"{name}/naive"] = by[v]["images_per_s"] / by["naive"]["images_per_s"]
        if load is not None and limit in by:
            r["tar2tf-load/limit"] = by[load]["images_per_s"] / by[limit]["images_per_s"]
        out[wl] = r
    return out


def _check(value: Optional[float], op: str, bound: float) -> Dict:
    if value is None:
        return {"value": None, "bound": f"{op} {bound}", "met": None}
    met = value >= bound if op == ">=" else value <= bound
    return {"value": round(value, 3), "bound": f"{op} {bound}", "met": met}


def targets(result: Dict) -> Dict[str, Dict]:
    rt = result.get("ratios", {})
    g = lambda wl, k: rt.get(wl, {}).get(k)  # noqa: E731
    t = {"passthrough tar2tf/limit-io": _check(g("passthrough", "tar2tf/limit"), ">=", 0.70),
         "resize224 tar2tf/naive": _check(g("resize224", "tar2tf/naive"), ">=", 1.8),
         "resize224 tar2tf/limit-codec": _check(g("resize224", "tar2tf/limit"), ">=", 0.9),
         "resize32 tar2tf/naive": _check(g("resize32", "tar2tf/naive"), ">=", 2.5)}
    # the same targets for the in-process driver (Dataset.load(path=...), no Beam)
    for wl, key, ref, op, bound in (("passthrough", "tar2tf-load/limit", "limit-io", ">=", 0.70),
                                    ("resize224", "tar2tf-load/naive", "naive", ">=", 1.8),
                                    ("resize224", "tar2tf-load/limit", "limit-codec", ">=", 0.9),
                                    ("resize32", "tar2tf-load/naive", "naive", ">=", 2.5)):
        if g(wl, key) is not None:
            t[f"{wl} tar2tf-load/{ref} (in-process)"] = _check(g(wl, key), op, bound)
    mem = result.get("memory") or {}
    t["memory: 4x images -> peak RSS ratio"] = _check(mem.get("ratio"), "<=", 1.2)
    pcr = result.get("pcr") or {}
    groups = {lv["groups"]: lv for lv in pcr.get("load", [])}
    t["PCR group 1 bytes fraction"] = _check(groups.get(1, {}).get("fraction"), "<=", 0.08)
    t["PCR group 5 bytes fraction"] = _check(groups.get(5, {}).get("fraction"), "<=", 0.40)
    if groups:
        exact = all(lv["exact_prefix"] for lv in groups.values())
        t["PCR: k groups read exactly the prefix"] = {"value": None, "bound": "bytes read == prefix", "met": exact}
    return t


def _f(v, fmt="{:.2f}"):
    return "-" if v is None else fmt.format(v)


def summary(result: Dict) -> List[str]:
    """One line per workload: the best tar2tf against the references."""
    lines = ["| workload | tar2tf (best mode) | images/s | MB/s | peak RSS MB | tar2tf/naive | tar2tf/webdataset "
             "| tar2tf/limit |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for wl in LIMIT:
        rt = result.get("ratios", {}).get(wl)
        if not rt:
            continue
        row = _by(result["rows"], wl)[rt["tar2tf_variant"]]
        lines.append(f"| {WORKLOAD_TITLE[wl]} | {rt['tar2tf_variant'].replace('tar2tf-', '')} | "
                     f"{row['images_per_s']:.0f} | {row['mb_per_s']:.1f} | {row['peak_rss_mb']:.0f} | "
                     f"{_f(rt.get('tar2tf/naive'))} | {_f(rt.get('tar2tf/webdataset'))} | "
                     f"{_f(rt.get('tar2tf/limit'))} ({rt.get('limit_variant') or '-'}) |")
    return lines + [""]


def _runs(result: Dict) -> str:
    n, short = result["repeat"], result.get("short_repeat", 1)
    if short <= 1:
        return f"{n} run(s)"
    return f"{n} runs ({n * short} for {', '.join(result.get('short_workloads', []))})"


def _scaling_lines(sc: Optional[Dict]) -> List[str]:
    if not sc:
        return []
    if "error" in sc:
        return [f"**Passthrough scaling**: failed: {sc['error'][-200:]}", ""]
    lines = ["**Passthrough scaling** (each variant also run on 1/4 of the shards; t = fixed + images / rate, "
             "from the medians at both sizes):", "",
             "| variant | 1/4 data s | all data s | fixed s per job | per-image rate, images/s | rate / limit-io's |",
             "|---|---:|---:|---:|---:|---:|"]
    for v, r in sc["variants"].items():
        if r["marginal_images_per_s"] is None:
            split = "n/a (the whole data was not slower) | n/a | n/a"
        else:
            ratio = "n/a" if r["marginal_vs_limit_io"] is None else f"{r['marginal_vs_limit_io']:.2f}"
            split = f"{r['fixed_seconds']:.2f} | {r['marginal_images_per_s']:.0f} | {ratio}"
        lines.append(f"| {v} | {r['seconds_small']:.2f} | {r['seconds_large']:.2f} | {split} |")
    return lines + [""]


def _recycled(result: Dict) -> str:
    mb = [r.get("recycled_mb", 0) for r in result["rows"] if r.get("ok")]
    if not mb or not min(mb):
        return "  Runs started on whatever memory was free (no page recycling)."
    return (f"  Before its clock started, each run wrote and deleted a {min(mb):.0f} MB scratch file, so "
            f"that every variant writes into recycled page-cache memory (benchmarks/pagecache.py).")


def markdown(result: Dict) -> str:
    m, d = result["machine"], result["dataset"]
    load = m.get("loadavg_before")
    lines = [f"### tar2tf benchmark, size `{result['size']}` ({result['date']})", "",
             f"Machine: {m['cores']} cores, {m['cpu']}, Python {m['python']}"
             + (f", load average {load[0]:.1f} at start (shared machine)" if load else "") + ".  "
             f"Data: {d['images']} JPEGs (mean {d['mean_jpeg_kb']:.1f} kB) in {d['shards']} tar shards, "
             f"{d['tar_mb']:.1f} MB.  Median of {_runs(result)}; MB/s = tar input bytes per second; "
             f"RSS = peak resident memory of the variant's process tree; CPU s = CPU time of the timed "
             f"region (all threads and worker processes); other load = cores other processes kept busy "
             f"meanwhile (the machine is shared).  Every run's output was verified."
             + _recycled(result), ""]
    lines += summary(result)
    order = {v: i for i, v in enumerate(variants.ALL)}
    for wl in LIMIT:
        rows = [r for r in result["rows"] if r["workload"] == wl]
        if not rows:
            continue
        lines += [f"**{WORKLOAD_TITLE[wl]}**", "",
                  "| variant | images/s | MB/s | seconds (runs) | CPU s | peak RSS MB | output MB | other load |",
                  "|---|---:|---:|---|---:|---:|---:|---:|"]
        for r in sorted(rows, key=lambda r: order.get(r["variant"], 99)):
            if not r.get("images_per_s"):
                lines.append(f"| {r['variant']} | failed: {str(r.get('error', ''))[-80:]!r} | | | | | | |")
                continue
            runs = ", ".join(f"{s:.2f}" for s in r["all_seconds"])
            flag = "" if r["ok"] else " (some runs FAILED)"
            lines.append(f"| {r['variant']}{flag} | {r['images_per_s']:.1f} | {r['mb_per_s']:.1f} | "
                         f"{r['seconds']:.2f} ({runs}) | {r['cpu_seconds']:.2f} | {r['peak_rss_mb']:.0f} | "
                         f"{r['out_mb']:.1f} | {r['other_load']:.2f} |")
        rt = result.get("ratios", {}).get(wl)
        if rt:
            parts = [f"{k} = {v:.2f}" for k, v in rt.items() if "/" in k and isinstance(v, float)]
            load = f", tar2tf-load = `{rt['load_variant']}`" if rt.get("load_variant") else ""
            lines += ["", f"Ratios (tar2tf = `{rt['tar2tf_variant']}`{load}): " + ", ".join(parts)]
        lines.append("")
    mem = result.get("memory")
    if mem and "ratio" in mem:
        lines += [f"**Memory flatness** ({mem['variant']}, {mem['workload']}): {mem['images_small']} images -> "
                  f"{mem['rss_small_mb']:.0f} MB, {mem['images_large']} images -> {mem['rss_large_mb']:.0f} MB "
                  f"(x{mem['ratio']:.2f})", ""]
    elif mem:
        lines += [f"**Memory flatness**: failed: {mem.get('error', '')[-200:]}", ""]
    lines += _scaling_lines(result.get("scaling"))
    if result.get("pcr"):
        lines += _pcr_lines(result["pcr"])
    if result.get("missing"):
        lines += ["**Not measured**: " + "; ".join(f"{k} ({v})" for k, v in sorted(result["missing"].items())), ""]
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
    out = [f"**PCR** convert ({runner}): {pcr['images']} images in "
           f"{pcr['convert_seconds']:.2f} s ({pcr['images'] / pcr['convert_seconds']:.1f} images/s), "
           f"{pcr['records']} records, {pcr['bytes_total'] / 1e6:.1f} MB written "
           f"({pcr['bytes_total'] / pcr['source_jpeg_bytes']:.3f} x the source JPEG bytes), "
           f"peak RSS {pcr.get('peak_rss', 0) / 1e6:.0f} MB.", "",
           "| scan groups | bytes read | fraction of all groups | fraction of source JPEGs | exactly the prefix "
           "| read images/s | read + decode images/s |", "|---|---:|---:|---:|---|---:|---:|"]
    for lv in pcr.get("load", []):
        out.append(f"| {lv['groups']} | {lv['bytes']:,} | {lv['fraction']:.3f} | {lv['fraction_of_source']:.3f} | "
                   f"{'yes' if lv['exact_prefix'] else '**no**'} | {lv['images'] / lv['seconds']:.0f} | "
                   f"{lv['images'] / lv['decode_seconds']:.0f} |")
    out.append("")
    return out
