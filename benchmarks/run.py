"""One command for the whole benchmark: ``python -m benchmarks.run --size quick|full``.

Every (variant, workload) runs in its own subprocess (``benchmarks.variants``) on the same
dataset in the same invocation; rounds interleave the variants so machine drift hits all
of them alike, and each figure is the median over ``--repeat`` rounds (times
``--short-repeat`` for the sub-second passthrough runs).  Peak RSS is the
worker's high-water mark (``VmHWM``) when its clock stops -- so the verification that
follows is not counted -- plus, in Beam's multi_processing mode, the sampled peak RSS sum
of its worker processes.  Every run's output is
verified after its clock stops; a run whose output is wrong counts as failed (exit 1).
Results go to ``<out>/results-<size>.json`` and ``.md``; see ``benchmarks/README.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Dict, List, Optional, Tuple

from benchmarks import dataset, pcr_bench, report, variants
from benchmarks.baselines import WORKLOADS

# sub-second runs, where one scheduler hiccup on a shared machine moves a figure by 20 %:
# each round runs them --short-repeat times (interleaved too), so their median is over more runs
SHORT_WORKLOADS = ("passthrough",)
PAGE = os.sysconf("SC_PAGE_SIZE")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _tree(pid: int) -> List[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for t in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{t}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
        except OSError:
            pass
    return out


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def _rss(pids: List[int], not_cmdline: bytes = b"") -> int:
    """Summed RSS of ``pids``, leaving out those whose command line is ``not_cmdline``: a
    child between fork and exec still runs the parent's program and shows the parent's
    pages as its own (sampled there, a worker start-up counted the parent twice)."""
    total = 0
    for p in pids:
        if not_cmdline and _cmdline(p) == not_cmdline:
            continue
        try:
            with open(f"/proc/{p}/statm") as f:
                total += int(f.read().split()[1]) * PAGE
        except (OSError, ValueError, IndexError):
            pass
    return total


def _busy() -> float:
    """Busy CPU seconds of the whole machine so far (``/proc/stat``)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def spawn(module: str, spec: Dict, log_path: str, timeout: float) -> Tuple[Optional[Dict], Dict]:
    """Run ``python -m module '<spec>'``; (its BENCH-RESULT or None, {exit, peak_rss, error, log})."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", TF_CPP_MIN_LOG_LEVEL="3")
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    stat0 = _busy()
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", module, json.dumps(spec)], stdout=log,
                                stderr=subprocess.STDOUT, env=env, cwd=ROOT, start_new_session=True)
    peak, desc_peak, start = 0, 0, time.time()
    done = threading.Event()
    status: Dict = {}

    def reap():
        _, st, ru = os.wait4(proc.pid, 0)
        status["code"], status["maxrss"] = os.waitstatus_to_exitcode(st), ru.ru_maxrss * 1024
        status["cpu"] = ru.ru_utime + ru.ru_stime
        proc.returncode = status["code"]
        done.set()

    threading.Thread(target=reap, daemon=True).start()
    killed = False
    root_cmdline = b""
    while not done.wait(0.1):
        tree = _tree(proc.pid)
        root_cmdline = root_cmdline or _cmdline(proc.pid)
        peak, desc_peak = max(peak, _rss(tree)), max(desc_peak, _rss(tree[1:], root_cmdline))
        if time.time() - start > timeout and not killed:
            os.killpg(proc.pid, signal.SIGKILL)  # the group of the process this function started
            killed = True
    wall, busy = time.time() - start, _busy() - stat0
    with open(log_path) as f:
        text = f.read()
    # CPU the rest of the machine used meanwhile (cores): the shared-machine caveat, measured
    others = max(0.0, (busy - status["cpu"]) / wall) if wall > 0 else 0.0
    info = {"exit": status["code"], "other_load": others, "peak_rss": max(peak, status["maxrss"]), "children_peak_rss": desc_peak,
            "log": log_path}
    lines = [ln for ln in text.splitlines() if ln.startswith("BENCH-RESULT ")]
    if status["code"] == 0 and lines:
        return json.loads(lines[-1][len("BENCH-RESULT "):]), info
    info["error"] = ("timed out; " if killed else "") + "\n".join(text.splitlines()[-15:])
    return None, info


def measure(spec: Dict, log_dir: str, timeout: float) -> Dict:
    """One variant run: its result, peak RSS, and ``ok`` = exit 0 + right count + verified."""
    tag = f"{spec['variant']}-{spec['workload']}-{spec.get('shards') or 'all'}"
    out, info = spawn("benchmarks.variants", spec, os.path.join(log_dir, tag + ".log"), timeout)
    res: Dict = {"variant": spec["variant"], "workload": spec["workload"], **info}
    if out is None:
        res["ok"] = False
        return res
    res.update(out)
    # the worker's own high-water mark when its clock stopped (verification excluded),
    # plus, for variants with worker processes, the sampled peak of those processes.
    # Other variants start no lasting children; a short fork+exec (a library running a
    # helper) would briefly show the parent's shared pages twice, so it is not counted
    # (for the variants with workers, children that have not exec'd yet are left out).
    children = info["children_peak_rss"] if spec["variant"] in variants.WITH_WORKERS else 0
    res["peak_rss"] = out["hwm_timed"] + children
    res["ok"] = res["records_out"] == res["images_in"] and res["verified"]
    if not res["ok"]:
        res["error"] = res.get("problem") or f"{res['records_out']} records for {res['images_in']} images"
    return res


def compile_sources() -> None:
    """Byte-compile the project's packages, as ``pip install`` does.  tar2tf's worker
    processes start inside the timed region; with ``PYTHONDONTWRITEBYTECODE`` set (as on the
    machine these benchmarks were developed on) and an editable install, each of them
    compiled every module it imports from source, ~20 ms per worker and job (measured).
    Python reads existing bytecode whatever that variable says."""
    import compileall
    for pkg in ("pipelines", "transforms", "benchmarks"):
        compileall.compile_dir(os.path.join(ROOT, pkg), quiet=1, maxlevels=0)


def median_row(runs: List[Dict]) -> Dict:
    good = [r for r in runs if r.get("ok")]
    first = runs[0]
    row = {"variant": first["variant"], "workload": first["workload"], "runs": len(runs), "ok": len(good) == len(runs)}
    if not good:
        row["error"] = next((r.get("error") for r in runs if r.get("error")), "wrong record count")
        return row
    secs = statistics.median(r["seconds"] for r in good)
    g = good[0]
    row.update(seconds=secs, images=g["images_in"], records_out=g["records_out"],
               images_per_s=g["images_in"] / secs, mb_per_s=g["bytes_in"] / secs / 1e6,
               out_mb=g["bytes_out"] / 1e6, peak_rss_mb=statistics.median(r["peak_rss"] for r in good) / 1e6,
               all_seconds=[round(r["seconds"], 3) for r in good],
               cpu_seconds=statistics.median(r["cpu_seconds"] for r in good),
               other_load=statistics.median(r["other_load"] for r in good),
               recycled_mb=min(r.get("recycled_bytes", 0) for r in good) / 1e6)
    if not row["ok"]:
        row["error"] = next(r.get("error") for r in runs if not r.get("ok"))
    return row


def best_beam_args(rows: List[Dict]) -> List[str]:
    """Beam args of the fastest tar2tf Beam mode (for PCR), threads if nothing ran."""
    cands = [r for r in rows if r["variant"] in variants.BEAM_MODES and r.get("images_per_s")]
    best = max(cands, key=lambda r: r["images_per_s"])["variant"] if cands else "tar2tf-beam-threads"
    return variants.BEAM_MODES[best]


def run_pcr(base: Dict, scratch: str, logs: str, timeout: float, beam_args: List[str], say) -> Dict:
    why = pcr_bench.missing_reason()
    if why:
        return {"missing": why}
    spec = dict(base, out=os.path.join(scratch, "pcr"), beam_args=beam_args)
    out, info = spawn("benchmarks.pcr_bench", spec, os.path.join(logs, "pcr.log"), timeout)
    if out is None:
        return {"error": info.get("error", "failed"), "log": info["log"]}
    out["peak_rss"] = info["peak_rss"]
    say(f"PCR convert {out['images'] / out['convert_seconds']:.1f} img/s; bytes fraction per groups: " +
        ", ".join(f"{lv['groups']}: {lv['fraction']:.3f}" for lv in out["load"]))
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


def memory_check(data, base, scratch, logs, rows, timeout, say) -> Optional[Dict]:
    """Peak RSS of the best tar2tf Beam mode on 1/4 of the shards vs all of them."""
    if len(data.shards) < 4:
        return None
    cands = [r for r in rows if r["variant"] in variants.BEAM_MODES and r["ok"]]
    if not cands:
        return None
    wl = "resize224" if any(r["workload"] == "resize224" for r in cands) else cands[0]["workload"]
    best = max((r for r in cands if r["workload"] == wl), key=lambda r: r["images_per_s"])
    quarter = len(data.shards) // 4
    spec = dict(base, variant=best["variant"], workload=wl, out=os.path.join(scratch, "memcheck"))
    small = measure(dict(spec, shards=quarter), logs, timeout)
    full = measure(spec, logs, timeout)
    if not (small.get("ok") and full.get("ok")):
        return {"error": small.get("error") or full.get("error")}
    out = {"variant": best["variant"], "workload": wl, "images_small": small["images_in"],
           "images_large": full["images_in"], "rss_small_mb": small["peak_rss"] / 1e6,
           "rss_large_mb": full["peak_rss"] / 1e6, "ratio": full["peak_rss"] / small["peak_rss"]}
    say(f"memory: {out['images_small']} -> {out['images_large']} images: "
        f"{out['rss_small_mb']:.0f} -> {out['rss_large_mb']:.0f} MB (x{out['ratio']:.2f})")
    return out


SCALING_VARIANTS = ("limit-io",)  # + the best Beam mode and the best in-process mode


def scaling_check(data, base, scratch, logs, rows, timeout, runs, say) -> Optional[Dict]:
    """Passthrough on 1/4 of the shards too, to split each variant's time into a fixed
    per-job part and a per-image part (t = fixed + images / rate, from the medians at both
    sizes): a sub-second workload's ratio is dominated by fixed costs (Beam's job set-up)
    that a larger dataset pays once."""
    full = {r["variant"]: r for r in rows if r["workload"] == "passthrough" and r.get("ok")}
    beam = [r for v, r in full.items() if v in variants.BEAM_MODES]
    if len(data.shards) < 4 or "limit-io" not in full or not beam:
        return None
    names = [max(beam, key=lambda r: r["images_per_s"])["variant"]] + [v for v in SCALING_VARIANTS if v in full]
    load = report.best_load(full)
    if load is not None:
        names.append(load)
    quarter = len(data.shards) // 4
    small: Dict[str, List[Dict]] = {}
    for _ in range(runs):
        for v in names:
            spec = dict(base, variant=v, workload="passthrough", shards=quarter,
                        out=os.path.join(scratch, f"scaling-{v}"))
            small.setdefault(v, []).append(measure(spec, logs, timeout))
    out: Dict[str, Dict] = {}
    for v in names:
        q = median_row(small[v])
        if not q.get("ok"):
            return {"error": f"{v}: {q.get('error')}"}
        f = full[v]
        dt, dn = f["seconds"] - q["seconds"], f["images"] - q["images"]
        ok = dt > 0 and dn > 0  # noise can swamp a tiny dataset's difference
        out[v] = {"images_small": q["images"], "seconds_small": q["seconds"], "images_large": f["images"],
                  "seconds_large": f["seconds"], "marginal_images_per_s": dn / dt if ok else None,
                  "fixed_seconds": q["seconds"] - dt * q["images"] / dn if ok else None}
    lim = out["limit-io"]["marginal_images_per_s"]
    for v, r in out.items():
        r["marginal_vs_limit_io"] = r["marginal_images_per_s"] / lim if lim and r["marginal_images_per_s"] else None
        if r["marginal_vs_limit_io"] is not None:
            say(f"scaling {v}: fixed {r['fixed_seconds']:.2f} s + {r['marginal_images_per_s']:.0f} img/s "
                f"({r['marginal_vs_limit_io']:.2f} x limit-io's)")
    return {"beam_variant": names[0], "variants": out}


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description="tar2tf benchmark: tar2tf vs naive, webdataset and hardware limits")
    ap.add_argument("--size", choices=sorted(dataset.SIZES), default="quick")
    ap.add_argument("--repeat", type=int, default=None, help="rounds per figure (default: quick 1, full 5)")
    ap.add_argument("--short-repeat", type=int, default=None,
                    help="runs per round of the sub-second passthrough workload (default: quick 1, full 3)")
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results"))
    ap.add_argument("--data-dir", default=None, help=f"dataset root (default {dataset.default_root()})")
    ap.add_argument("--work-dir", default=None, help="scratch directory for outputs (default: a temp dir)")
    ap.add_argument("--variants", default=",".join(variants.ALL), help="comma list (default: all)")
    ap.add_argument("--workloads", default=",".join(WORKLOADS + ("pcr",)), help="comma list (default: all + pcr)")
    ap.add_argument("--no-memory-check", action="store_true")
    ap.add_argument("--no-scaling-check", action="store_true",
                    help="skip the passthrough runs on 1/4 of the shards (fixed vs per-image time)")
    ap.add_argument("--no-recycle-pages", action="store_true",
                    help="do not write and delete a scratch file before each run (benchmarks/pagecache.py)")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per measurement")
    a = ap.parse_args(argv)
    repeat = a.repeat or (1 if a.size == "quick" else 5)
    short = a.short_repeat or (1 if a.size == "quick" else 3)
    say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    compile_sources()
    data = dataset.build(a.size, a.data_dir, log=say)
    os.makedirs(a.out, exist_ok=True)
    scratch = a.work_dir or tempfile.mkdtemp(prefix="tar2tf-bench-")
    logs = os.path.join(a.out, "logs-" + a.size)
    os.makedirs(logs, exist_ok=True)
    wanted = [v for v in a.variants.split(",") if v]
    unknown = sorted(set(wanted) - set(variants.ALL))
    if unknown:
        ap.error(f"unknown variants {unknown}; choose from {list(variants.ALL)}")
    asked = [w for w in a.workloads.split(",") if w]
    workloads = [w for w in asked if w in WORKLOADS]
    base = {"size": a.size, "root": a.data_dir, "recycle": not a.no_recycle_pages}
    runs: Dict[tuple, List[Dict]] = {}
    missing: Dict[str, str] = {}
    pcr_runs: List[Dict] = []
    t_start, load_before = time.time(), os.getloadavg()
    for rnd in range(repeat):
        for wl, sub in ((w, k) for w in workloads for k in range(short if w in SHORT_WORKLOADS else 1)):
            for v in wanted:
                why = variants.missing_reason(v, wl)
                if why:
                    if not why.startswith("n/a"):
                        missing[f"{v}/{wl}"] = why
                    continue
                spec = dict(base, variant=v, workload=wl, out=os.path.join(scratch, f"{v}-{wl}"))
                r = measure(spec, logs, a.timeout)
                runs.setdefault((wl, v), []).append(r)
                say(f"[{rnd + 1}/{repeat}{'.' + str(sub + 1) if sub else ''}] {wl:12s} {v:22s} " + (
                    f"{r['images_in'] / r['seconds']:8.1f} img/s  rss {r['peak_rss'] / 1e6:7.0f} MB"
                    if r.get("ok") else f"FAILED: {str(r.get('error'))[-300:]} (log {r['log']})"))
        if "pcr" in asked:
            rows_so_far = [median_row(rs) for rs in runs.values()]
            pcr_runs.append(run_pcr(base, scratch, logs, a.timeout, best_beam_args(rows_so_far), say))
    rows = [median_row(rs) for rs in runs.values()]
    memory = None
    if not a.no_memory_check:
        memory = memory_check(data, base, scratch, logs, rows, a.timeout, say)
    scaling = None
    if not a.no_scaling_check and "passthrough" in workloads:
        scaling = scaling_check(data, base, scratch, logs, rows, a.timeout, max(3, min(5, repeat * short)), say)
    result = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "size": a.size, "repeat": repeat,
              "short_repeat": short, "short_workloads": list(SHORT_WORKLOADS),
              "machine": {"cores": os.cpu_count(), "cpu": report.cpu_model(), "python": platform.python_version(),
                          "platform": platform.platform(), "loadavg_before": load_before,
                          "loadavg_after": os.getloadavg()},
              "dataset": {"dir": data.directory, "shards": len(data.shards), "images": data.images,
                          "tar_mb": data.tar_bytes / 1e6, "mean_jpeg_kb": data.jpeg_bytes / data.images / 1e3},
              "rows": rows, "missing": missing, "memory": memory, "scaling": scaling, "pcr": median_pcr(pcr_runs),
              "wall_seconds": time.time() - t_start}
    result["ratios"] = report.ratios(rows)
    result["targets"] = report.targets(result)
    with open(os.path.join(a.out, f"results-{a.size}.json"), "w") as f:
        json.dump(result, f, indent=1, sort_keys=True)
    md = report.markdown(result)
    with open(os.path.join(a.out, f"results-{a.size}.md"), "w") as f:
        f.write(md)
    print(md)
    bad = [f"{r['workload']}/{r['variant']}" for r in rows if not r["ok"]]
    pcr = result["pcr"] or {}
    if pcr.get("error") or any(not lv["ok"] or not lv["exact_prefix"] for lv in pcr.get("load", [])):
        bad.append("pcr")
    if bad:
        say("variants with wrong output or errors: " + ", ".join(bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
