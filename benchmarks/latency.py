"""How much of a job's time is waiting on the store, one request after another
(docs/benchmarks.md, "Scale", "Latency")::

    python -m benchmarks.latency --shards 400 --delays 0,25 --runners beam,inprocess

Starts a moto S3 server (``python -m moto.server``, by its PID) and, in this process, a
:mod:`benchmarks.latency_proxy` in front of it; writes ``--shards`` tiny input tar shards
(two records of two small members each) into a bucket straight to moto, then for each
runner and each delay runs, as a user would::

    tar2tf convert s3://B/in/shard-{000000..N-1}.tar -o s3://B/out/t-{}.record \\
        --work-dir s3://B/work --s3-endpoint <proxy> --runner beam|inprocess

with the proxy adding that many milliseconds to every request.  Each run starts on an
empty ``out/`` and ``work/``; its output is checked with ``tar2tf verify`` (straight to
moto, after the proxy's counts are taken).

Reported per run: wall time of the command, the job's own time and counters (its
summary), request turns in total and per input shard, by operation kind, the most
requests in flight at once, the 1-minute load average before and after, and per burst of
one kind of request on one key shape (``work/*/piece-#.recs``) the count and the times of
the first and last request -- a job's steps touch different keys (inputs read from
``in/``, pieces written to and read from ``work/``, shards and the manifest to ``out/``),
so these time the steps as the store saw them.  Per runner, with a 0 ms run and a
delayed one::

    ratio = (wall(d) - wall(0)) / (requests(d) * d)

1.0: every request waited for the one before; near 0: the delay hidden by requests in
flight together.  The goal of issue 45 is <= 0.15.

A markdown table goes to stdout, JSON to ``--json`` (default
``benchmarks/results/latency-<N>.json``), each job's log to ``latency-logs/`` beside it.
``--s3-server URL --bucket B`` uses an S3-compatible server already running instead.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Dict, List

from benchmarks.latency_proxy import LatencyProxy

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUCKET = "latency"  # the default; --bucket names another
# moto checks no credentials; any pair signs the requests, and none of the user's is used
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "AKIALATENCYBENCH0001",
    "AWS_SECRET_ACCESS_KEY": "latency-bench-not-a-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
}
RUNNER_ARGS = {"beam": ["--runner", "beam"], "inprocess": ["--runner", "inprocess"]}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env() -> Dict[str, str]:
    """This process's environment without the user's AWS settings, with the bench's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.pop("TAR2TF_DIRECT_RUNNING_MODE", None)  # the runner as a user gets it
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env.update(CREDENTIALS)
    return env


class Server:
    """An S3-compatible server already running at ``url`` (``--s3-server``): not stopped."""

    def __init__(self, url: str):
        self.url = url.rstrip("/")

    def wait(self) -> "Server":
        return self

    def stop(self) -> None:
        pass


class Moto:
    """``python -m moto.server`` on 127.0.0.1 and a free port, started and stopped by PID."""

    def __init__(self, log_path: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(log_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=clean_env(),
            start_new_session=True,
        )

    def wait(self, timeout: float = 60.0) -> "Moto":
        import requests

        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"moto server exited with {self.proc.returncode}")
            try:
                if requests.get(f"{self.url}/moto-api/data.json", timeout=2).ok:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"moto server not answering after {timeout} s")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def client(url: str):
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        config=Config(max_pool_connections=32, s3={"addressing_style": "path"}),
    )


def tiny_shard(index: int) -> bytes:
    """Shard ``index``: two samples, each ``<key>.cls`` (a number) + ``<key>.txt``; tiny, so
    that the job's time is its requests and its per-shard work, not bytes."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tf:
        for r in range(2):
            key = f"s{index:06d}-{r}"
            for ext, data in (("cls", b"%d" % ((index + r) % 10)), ("txt", key.encode())):
                info = tarfile.TarInfo(f"{key}.{ext}")
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def upload_inputs(s3, bucket: str, shards: int) -> None:
    def put(i: int) -> None:
        s3.put_object(Bucket=bucket, Key=f"in/shard-{i:06d}.tar", Body=tiny_shard(i))

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(put, range(shards)))


def empty(s3, bucket: str, prefixes=("out/", "work/")) -> int:
    """Delete everything under ``prefixes`` (1,000 keys a request); how many keys."""
    n = 0
    for prefix in prefixes:
        pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        for page in pages:
            keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
            if keys:
                s3.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})
                n += len(keys)
    for up in s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []):
        s3.abort_multipart_upload(Bucket=bucket, Key=up["Key"], UploadId=up["UploadId"])
    return n


def run_job(
    runner: str,
    shards: int,
    bucket: str,
    proxy: LatencyProxy,
    server: "Server | Moto",
    logs: str,
    timeout: float,
) -> dict:
    delay_ms = round(proxy.delay_s * 1000, 3)
    tag = f"{runner}-{shards}-{delay_ms:g}ms"
    summary = os.path.join(logs, f"{tag}.summary.json")
    if os.path.exists(summary):
        os.unlink(summary)
    src = f"s3://{bucket}/in/shard-{{000000..{shards - 1:06d}}}.tar"
    cmd = [sys.executable, "-m", "launch.cli", "convert", src]
    cmd += ["-o", f"s3://{bucket}/out/t-{{}}.record", "--work-dir", f"s3://{bucket}/work"]
    cmd += ["--s3-endpoint", proxy.url, "--no-progress", "--summary-json", summary]
    cmd += RUNNER_ARGS[runner]
    log_path = os.path.join(logs, f"{tag}.log")
    load_before = os.getloadavg()[0]
    proxy.reset()
    with open(log_path, "wb") as log:
        t = time.monotonic()
        rc = subprocess.run(
            cmd, cwd=ROOT, env=clean_env(), stdout=log, stderr=subprocess.STDOUT, timeout=timeout
        ).returncode
        wall = time.monotonic() - t
    counts = proxy.counts()
    # the machine's load while the job ran: other processes' work slows the 0 ms run
    # (CPU) more than the delayed one (sleeps), which lowers the ratio
    loadavg = [load_before, os.getloadavg()[0]]
    row = {
        "runner": runner,
        "shards": shards,
        "delay_ms": delay_ms,
        "exit_code": rc,
        "wall_s": round(wall, 3),
        "requests": counts["total"],
        "requests_per_shard": round(counts["total"] / shards, 2),
        "counts": counts,
        "loadavg_1min": loadavg,
        "log": os.path.relpath(log_path, ROOT),
    }
    if os.path.exists(summary):
        with open(summary) as f:
            rep = json.load(f)
        row["job_s"] = rep.get("seconds")
        row["records_written"] = rep.get("totals", {}).get("records_written")
        row["manifest"] = rep.get("manifest")
        row["counters"] = rep.get("counters", {})
    row["verify_exit_code"] = verify(row.get("manifest"), server, logs, tag)
    return row


def verify(manifest, server: "Server | Moto", logs: str, tag: str):
    """``tar2tf verify`` of the run's manifest, straight to moto (not counted); its exit
    code, None without a manifest."""
    if not manifest:
        return None
    cmd = [sys.executable, "-m", "launch.cli", "verify", manifest, "--s3-endpoint", server.url]
    with open(os.path.join(logs, f"{tag}.verify.log"), "wb") as log:
        return subprocess.run(
            cmd, cwd=ROOT, env=clean_env(), stdout=log, stderr=subprocess.STDOUT, timeout=600
        ).returncode


def ratios(rows: List[dict]) -> List[dict]:
    """Per runner and delay d > 0: (wall(d) - wall(0)) / (requests(d) * d)."""
    out = []
    for runner in dict.fromkeys(r["runner"] for r in rows):
        mine = [r for r in rows if r["runner"] == runner and r["exit_code"] == 0]
        base = next((r for r in mine if r["delay_ms"] == 0), None)
        for r in mine:
            if base is None or r["delay_ms"] == 0 or not r["requests"]:
                continue
            waited = r["requests"] * r["delay_ms"] / 1000
            extra = r["wall_s"] - base["wall_s"]
            out.append(
                {
                    "runner": runner,
                    "delay_ms": r["delay_ms"],
                    "extra_wall_s": round(extra, 3),
                    "serial_wait_s": round(waited, 3),
                    "ratio": round(extra / waited, 3),
                }
            )
    return out


def markdown(result: dict) -> str:
    rows, n = result["rows"], result["shards"]
    kinds = sorted({k for r in rows for k in r["counts"]["by_kind"]})
    lines = [
        f"**Latency**: {n} tiny input shards, s3:// in and out, work directory in the bucket",
        "",
        "| runner | delay | wall s | job s | requests | per shard | most in flight | load | verify |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ok = {0: "ok", None: "-"}.get(r["verify_exit_code"], f"exit {r['verify_exit_code']}")
        if r["exit_code"]:
            ok = f"job exit {r['exit_code']}"
        lines.append(
            f"| {r['runner']} | {r['delay_ms']:g} ms | {r['wall_s']:.1f} | "
            f"{r.get('job_s') or 0:.1f} | {r['requests']} | {r['requests_per_shard']:.2f} | "
            f"{r['counts']['max_in_flight']} | "
            f"{r['loadavg_1min'][0]:.1f}-{r['loadavg_1min'][1]:.1f} | {ok} |"
        )
    lines += ["", "Requests per input shard, by operation kind:", ""]
    lines.append("| runner | delay | " + " | ".join(kinds) + " |")
    lines.append("|---|---|" + "---|" * len(kinds))
    for r in rows:
        by = r["counts"]["by_kind"]
        cells = " | ".join(f"{by.get(k, 0) / n:.2f}" for k in kinds)
        lines.append(f"| {r['runner']} | {r['delay_ms']:g} ms | {cells} |")
    if result["ratios"]:
        lines += ["", "| runner | delay | extra wall s | requests x delay s | ratio |"]
        lines.append("|---|---|---|---|---|")
        for q in result["ratios"]:
            lines.append(
                f"| {q['runner']} | {q['delay_ms']:g} ms | {q['extra_wall_s']:.1f} | "
                f"{q['serial_wait_s']:.1f} | {q['ratio']:.2f} |"
            )
    for r in rows:
        if not r["delay_ms"]:
            continue
        lines += [
            "",
            f"Steps as the store saw them, {r['runner']} at {r['delay_ms']:g} ms "
            "(seconds from the job's start; a row is a burst: one kind of request on one "
            "key shape, no pause over 2 s):",
            "",
            "| kind | keys | requests | first s | last s |",
            "|---|---|---|---|---|",
        ]
        for a in r["counts"]["by_kind_area"]:
            lines.append(
                f"| {a['kind']} | {a['area'] or '(bucket)'} | {a['count']} | "
                f"{a['first_s']:.1f} | {a['last_s']:.1f} |"
            )
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shards", type=int, default=400, help="tiny input shards (default 400)")
    p.add_argument("--delays", default="0,25", help="ms per request, comma-separated")
    p.add_argument("--runners", default="beam,inprocess", help="beam,inprocess (default both)")
    p.add_argument("--json", help="JSON results (default benchmarks/results/latency-<N>.json)")
    p.add_argument("--timeout", type=float, default=3600, help="seconds per job")
    p.add_argument(
        "--s3-server",
        help="an S3-compatible server already running (http://host:port) instead of "
        "starting moto; its --bucket is created if missing, out/ and work/ in it emptied",
    )
    p.add_argument("--bucket", default=BUCKET, help=f"the bucket (default {BUCKET})")
    args = p.parse_args(argv)
    runners = [r for r in args.runners.split(",") if r]
    unknown = set(runners) - set(RUNNER_ARGS)
    if unknown or args.shards < 1:
        p.error(f"--runners takes {','.join(RUNNER_ARGS)}; --shards >= 1")
    delays = [float(d) for d in args.delays.split(",") if d]
    out = args.json or os.path.join(ROOT, "benchmarks", "results", f"latency-{args.shards}.json")
    logs = os.path.join(os.path.dirname(os.path.abspath(out)), "latency-logs")
    os.makedirs(logs, exist_ok=True)
    moto_log = None
    if args.s3_server:
        server = Server(args.s3_server)
    else:
        moto_log = tempfile.NamedTemporaryFile(prefix="moto-", suffix=".log", delete=False).name
        server = Moto(moto_log)
    proxy = None
    rows: List[dict] = []
    try:
        server.wait()
        s3 = client(server.url)
        if args.bucket not in [b["Name"] for b in s3.list_buckets().get("Buckets", [])]:
            s3.create_bucket(Bucket=args.bucket)
        upload_inputs(s3, args.bucket, args.shards)
        proxy = LatencyProxy(server.url, 0.0).start()
        for runner in runners:
            for d in delays:
                empty(s3, args.bucket)
                proxy.delay_s = d / 1000
                row = run_job(runner, args.shards, args.bucket, proxy, server, logs, args.timeout)
                rows.append(row)
                print(
                    f"{runner} {d:g} ms: {row['wall_s']:.1f} s, {row['requests']} requests, "
                    f"exit {row['exit_code']}, verify {row['verify_exit_code']}",
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        if proxy is not None:
            proxy.stop()
        server.stop()
        if moto_log:
            os.unlink(moto_log)
    result = {
        "shards": args.shards,
        "delays_ms": delays,
        "runners": runners,
        "cpu_count": os.cpu_count(),
        "rows": rows,
        "ratios": ratios(rows),
    }
    result["markdown"] = markdown(result)
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    print(result["markdown"])
    failed = [r for r in rows if r["exit_code"] != 0 or r["verify_exit_code"] != 0]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
