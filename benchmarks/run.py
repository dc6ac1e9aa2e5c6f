"""One command for the whole benchmark: ``python -m benchmarks.run --size quick|full``.

Every (variant, workload) runs in its own subprocess (``benchmarks.variants``) on the same
dataset in the same invocation; rounds interleave the variants so machine drift hits all
of them alike, and each figure is the median over ``--repeat`` rounds.  Peak RSS is the
peak of the summed RSS of the variant's whole process tree (the process and every
descendant: worker processes, Beam's SDK workers), sampled with psutil every 0.1 s up to
the moment its clock stops, so the verification that follows is not counted.  Every run's
output is verified after its clock stops; a run whose output is wrong counts as failed
(exit 1).  Then the scaling runs: for resize224 and passthrough, each tar2tf driver also
on a quarter of the shards (1x; the full size is 4x) with 1 and with 2 workers.  Results
go to ``<out>/results-<size>.json`` and ``.md``; see ``benchmarks/README.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from typing import Dict, List, Optional

from benchmarks import dataset, pcr_bench, processes, report, variants
from benchmarks.baselines import WORKLOADS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def measure(spec: Dict, log_dir: str, timeout: float) -> Dict:
    """One variant run: its result, peak tree RSS, and ``ok`` = exit 0 + right count + verified."""
    tag = f"{spec['variant']}-{spec['workload']}-{spec.get('shards') or 'all'}-w{spec.get('workers') or 'n'}"
    out, info = processes.spawn(
        "benchmarks.variants", spec, os.path.join(log_dir, tag + ".log"), timeout
    )
    samples = info.pop("rss_samples")
    res: Dict = {"variant": spec["variant"], "workload": spec["workload"], **info}
    if out is None:
        res["ok"] = False
        return res
    res.update(out)
    timed = [rss for t, rss in samples if t <= out["clock_stop"]]
    res["peak_rss"] = max(timed or [rss for _, rss in samples] or [0])
    res["ok"] = res["records_out"] == res["images_in"] and res["verified"]
    if not res["ok"]:
        res["error"] = (
            res.get("problem") or f"{res['records_out']} records for {res['images_in']} images"
        )
    return res


def compile_sources() -> None:
    """Byte-compile the project's packages, as ``pip install`` does.  tar2tf's worker
    processes start inside the timed region; with ``PYTHONDONTWRITEBYTECODE`` set and an
    editable install, each of them would compile every module it imports from source.
    Python reads existing bytecode whatever that variable says."""
    import compileall

    for pkg in ("pipelines", "transforms", "benchmarks"):
        compileall.compile_dir(os.path.join(ROOT, pkg), quiet=1, maxlevels=0)


def median_row(runs: List[Dict]) -> Dict:
    good = [r for r in runs if r.get("ok")]
    first = runs[0]
    row = {
        "variant": first["variant"],
        "workload": first["workload"],
        "runs": len(runs),
        "ok": len(good) == len(runs),
    }
    if not good:
        row["error"] = next((r.get("error") for r in runs if r.get("error")), "wrong record count")
        return row
    secs = statistics.median(r["seconds"] for r in good)
    g = good[0]
    cpu = statistics.median(r["cpu_seconds"] for r in good)
    row.update(
        seconds=secs,
        images=g["images_in"],
        records_out=g["records_out"],
        workers=g["workers"],
        images_per_s=g["images_in"] / secs,
        mb_per_s=g["bytes_in"] / secs / 1e6,
        out_mb=g["bytes_out"] / 1e6,
        peak_rss_mb=statistics.median(r["peak_rss"] for r in good) / 1e6,
        all_seconds=[round(r["seconds"], 3) for r in good],
        cpu_seconds=cpu,
        cpu_ms_per_image=cpu / g["images_in"] * 1e3,
        other_load=statistics.median(r["other_load"] for r in good),
        recycled_mb=min(r.get("recycled_bytes", 0) for r in good) / 1e6,
    )
    if not row["ok"]:
        row["error"] = next(r.get("error") for r in runs if not r.get("ok"))
    return row


def run_pcr(
    base: Dict, scratch: str, logs: str, timeout: float, say, mode: str = "tar2tf-beam"
) -> Dict:
    """PCR conversion and loading (benchmarks/pcr_bench.py) on the Beam mode ``mode``."""
    why = pcr_bench.missing_reason()
    if why:
        return {"missing": why}
    spec = dict(base, out=os.path.join(scratch, "pcr"), beam_args=variants.BEAM_MODES[mode])
    out, info = processes.spawn(
        "benchmarks.pcr_bench", spec, os.path.join(logs, "pcr.log"), timeout
    )
    if out is None:
        return {"error": info.get("error", "failed"), "log": info["log"]}
    out["peak_rss"] = max([rss for _, rss in info["rss_samples"]] or [0])
    say(
        f"PCR convert {out['images'] / out['convert_seconds']:.1f} img/s; bytes fraction per groups: "
        + ", ".join(f"{lv['groups']}: {lv['fraction']:.3f}" for lv in out["load"])
    )
    return out


def median_pcr(runs: List[Dict]) -> Optional[Dict]:
    good = [r for r in runs if "load" in r]
    if not good:
        return runs[0] if runs else None
    out = dict(good[0])
    out["convert_seconds"] = statistics.median(r["convert_seconds"] for r in good)
    out["runs"] = len(runs)
    out["load"] = []
    for i, lv in enumerate(good[0]["load"]):
        m = dict(lv)
        for k in ("seconds", "decode_seconds"):
            m[k] = statistics.median(r["load"][i][k] for r in good)
        m["exact_prefix"] = all(r["load"][i]["exact_prefix"] for r in good)
        out["load"].append(m)
    return out


SCALING_WORKLOADS = ("resize224", "passthrough")


def scaling(
    data,
    base,
    scratch,
    logs,
    rows,
    drivers,
    workloads,
    timeout,
    repeat,
    say,
    on_result=lambda sc: None,
) -> List[Dict]:
    """Each driver on a quarter of the shards (1x) with 1 and 2 workers; with the full-size
    run (4x, 2 workers) from the main rounds.  Gives the speed-up from a second worker, the
    time growth from 4x the images, and the peak RSS growth (the memory target)."""
    if len(data.shards) < 4:
        return []
    quarter = len(data.shards) // 4
    full = {(r["workload"], r["variant"]): r for r in rows if r.get("ok")}
    out = []
    for wl in (w for w in SCALING_WORKLOADS if w in workloads):
        for v in drivers:
            if (wl, v) not in full:
                continue
            small = {}
            for workers in (1, 2):
                runs = [
                    measure(
                        dict(
                            base,
                            variant=v,
                            workload=wl,
                            shards=quarter,
                            workers=workers,
                            out=os.path.join(scratch, f"scaling-{v}-{wl}"),
                        ),
                        logs,
                        timeout,
                    )
                    for _ in range(repeat)
                ]
                small[workers] = median_row(runs)
            f = full[(wl, v)]
            one, two = small[1], small[2]
            if not (one.get("ok") and two.get("ok")):
                out.append(
                    {"workload": wl, "variant": v, "error": one.get("error") or two.get("error")}
                )
                continue
            r = {
                "workload": wl,
                "variant": v,
                "images_1x": two["images"],
                "images_4x": f["images"],
                "seconds_1x_1w": one["seconds"],
                "seconds_1x_2w": two["seconds"],
                "seconds_4x_2w": f["seconds"],
                "speedup_2w": one["seconds"] / two["seconds"],
                "time_ratio_4x": f["seconds"] / two["seconds"],
                "images_per_s_1x_1w": one["images_per_s"],
                "images_per_s_1x_2w": two["images_per_s"],
                "images_per_s_4x_2w": f["images_per_s"],
                "rss_1x_1w_mb": one["peak_rss_mb"],
                "rss_1x_2w_mb": two["peak_rss_mb"],
                "rss_4x_2w_mb": f["peak_rss_mb"],
                "rss_ratio_4x": f["peak_rss_mb"] / two["peak_rss_mb"],
            }
            out.append(r)
            on_result(out)
            say(
                f"scaling {wl} {v}: 2 workers x{r['speedup_2w']:.2f}; 4x images x{r['time_ratio_4x']:.2f} "
                f"time, x{r['rss_ratio_4x']:.2f} peak RSS"
            )
    return out


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(
        description="tar2tf benchmark: tar2tf vs naive, webdataset, tf.data and hardware limits"
    )
    ap.add_argument("--size", choices=sorted(dataset.SIZES), default="quick")
    ap.add_argument("--repeat", type=int, default=1, help="rounds per figure (default 1)")
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results"))
    ap.add_argument(
        "--data-dir", default=None, help=f"dataset root (default {dataset.default_root()})"
    )
    ap.add_argument(
        "--work-dir", default=None, help="scratch directory for outputs (default: a temp dir)"
    )
    ap.add_argument(
        "--variants",
        default=",".join(variants.DEFAULT),
        help=f"comma list (default: {','.join(variants.DEFAULT)}; also: "
        f"{','.join(v for v in variants.ALL if v not in variants.DEFAULT)})",
    )
    ap.add_argument(
        "--workloads",
        default=None,
        help="comma list of passthrough,resize224,resize32,pcr (default: all; pcr only "
        "for the quick size)",
    )
    ap.add_argument(
        "--shards",
        type=int,
        default=None,
        help="run on the first N shards of the dataset only (a reduced size)",
    )
    ap.add_argument(
        "--no-scaling",
        action="store_true",
        help="skip the 1x (a quarter of the shards) runs with 1 and 2 workers",
    )
    ap.add_argument(
        "--no-recycle-pages",
        action="store_true",
        help="do not write and delete a scratch file before each run (benchmarks/pagecache.py)",
    )
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per measurement")
    a = ap.parse_args(argv)
    repeat = a.repeat
    say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    compile_sources()
    data = dataset.build(a.size, a.data_dir, log=say)
    if a.shards:
        data = data.subset(a.shards)
    os.makedirs(a.out, exist_ok=True)
    scratch = a.work_dir or tempfile.mkdtemp(prefix="tar2tf-bench-")
    logs = os.path.join(a.out, "logs-" + a.size)
    os.makedirs(logs, exist_ok=True)
    wanted = [v for v in a.variants.split(",") if v]
    unknown = sorted(set(wanted) - set(variants.ALL))
    if unknown:
        ap.error(f"unknown variants {unknown}; choose from {list(variants.ALL)}")
    default_wl = WORKLOADS + (("pcr",) if a.size == "quick" else ())
    asked = [w for w in (a.workloads or ",".join(default_wl)).split(",") if w]
    workloads = [w for w in asked if w in WORKLOADS]
    base = {
        "size": a.size,
        "root": a.data_dir,
        "recycle": not a.no_recycle_pages,
        "shards": a.shards,
    }
    runs: Dict[tuple, List[Dict]] = {}
    pcr_runs: List[Dict] = []
    t_start, load_before = time.time(), os.getloadavg()

    def write(runs, scale, pcr_runs, partial: bool) -> Dict:
        """The results so far: ``results-<size>.partial.{json,md}`` after every measurement
        (a run stopped early still leaves its figures), the final files at the end."""
        result = {
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "size": a.size,
            "repeat": repeat,
            "partial": partial,
            "shards_used": len(data.shards),
            "shards_in_size": data.size.shards,
            "machine": {
                "cores": os.cpu_count(),
                "cpu": report.cpu_model(),
                "python": platform.python_version(),
                "platform": platform.platform(),
                "loadavg_start": load_before,
                "loadavg_end": os.getloadavg(),
            },
            "dataset": {
                "dir": data.directory,
                "shards": len(data.shards),
                "images": data.images,
                "tar_mb": data.tar_bytes / 1e6,
                "mean_jpeg_kb": data.jpeg_bytes / data.images / 1e3,
            },
            "codec": report.codec_info(),
            "rows": [median_row(rs) for rs in runs.values()],
            "scaling": scale,
            "pcr": median_pcr(pcr_runs),
            "wall_seconds": time.time() - t_start,
        }
        result["ratios"] = report.ratios(result["rows"])
        result["targets"] = report.targets(result)
        stem = os.path.join(a.out, f"results-{a.size}" + (".partial" if partial else ""))
        with open(stem + ".json", "w") as f:
            json.dump(result, f, indent=1, sort_keys=True)
        md = report.markdown(result)
        with open(stem + ".md", "w") as f:
            f.write(md)
        if not partial:
            print(md)
        return result

    for rnd in range(repeat):
        for wl in workloads:
            for v in wanted:
                if variants.missing_reason(v, wl):
                    continue
                spec = dict(base, variant=v, workload=wl, out=os.path.join(scratch, f"{v}-{wl}"))
                r = measure(spec, logs, a.timeout)
                runs.setdefault((wl, v), []).append(r)
                write(runs, [], pcr_runs, partial=True)
                say(
                    f"[{rnd + 1}/{repeat}] {wl:12s} {v:20s} "
                    + (
                        f"{r['images_in'] / r['seconds']:8.1f} img/s  {r['seconds']:7.2f} s  "
                        f"rss {r['peak_rss'] / 1e6:7.0f} MB  other load {r['other_load']:.2f}"
                        if r.get("ok")
                        else f"FAILED: {str(r.get('error'))[-300:]} (log {r['log']})"
                    )
                )
        if "pcr" in asked:
            mode = "tar2tf-beam" if "tar2tf-beam" in wanted else "tar2tf-beam-threads"
            pcr_runs.append(run_pcr(base, scratch, logs, a.timeout, say, mode))
    # the codec A/B variant runs the default's driver: no scaling runs of its own
    drivers = [v for v in wanted if v in variants.TAR2TF and v not in variants.CODEC_AB]
    scale: List[Dict] = []
    if not a.no_scaling:
        rows = [median_row(rs) for rs in runs.values()]
        scale = scaling(
            data,
            base,
            scratch,
            logs,
            rows,
            drivers,
            workloads,
            a.timeout,
            repeat,
            say,
            on_result=lambda sc: write(runs, sc, pcr_runs, partial=True),
        )
    result = write(runs, scale, pcr_runs, partial=False)
    rows = result["rows"]
    bad = [f"{r['workload']}/{r['variant']}" for r in rows if not r["ok"]]
    bad += [f"scaling {s['workload']}/{s['variant']}" for s in scale if "error" in s]
    pcr = result["pcr"] or {}
    if pcr.get("error") or any(
        not lv["ok"] or not lv["exact_prefix"] for lv in pcr.get("load", [])
    ):
        bad.append("pcr")
    if bad:
        say("variants with wrong output or errors: " + ", ".join(bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
