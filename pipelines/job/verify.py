"""Check a finished dataset against its manifest (``tar2tf verify``).

For a TFRecord dataset every shard is read once, streaming, and checked for:

* existence, byte size and digest (crc32c; sha256 in older manifests) against the manifest row;
* TFRecord framing: length and data CRCs of every record (``tfrecord.iter_frames``);
* record count against the manifest row;
* every ``tf.train.Example`` parsed and compared with the manifest schema (feature
  names, dtypes, fixed lengths, required features);
* optionally (``decode_images``) every image feature decoded with Pillow;
* the DALI ``.idx`` file, when the job wrote one, against the real record offsets.

Then the manifest's own totals are checked against the shards (records, bytes, shard
count), the conservation rule ``read = written + rejected + filtered`` and the rejects
file's line count.  For a PCR dataset (manifest ``kind: pcr``) the record files are
checked against the manifest's rows, the index against the manifest's sha256, and the
files against the index by ``transforms.pcr.verify``.  Nothing stops at the first
problem: the report lists all of them.

A damaged manifest is a problem too (a JSON list, a row whose ``bytes`` is not a number, a
shard path that is not a readable regular file, a frame length beyond the shard's size):
the rows that can be checked still are.  A JSON object that no tar2tf job wrote (no
``"tool": "tar2tf"``, or a ``kind`` it does not write) is :class:`NotAManifest`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import tempfile
from typing import Any, Dict, List, Optional

from pipelines.job import names
from transforms.ops.image_names import IMAGE_EXTENSIONS
from transforms.stores import StoreConfig, basename, dirname, get_store, join, split_url
from transforms.tfrecord import digests
from transforms.tfrecord.framing import FRAME_OVERHEAD, CorruptRecordError, iter_frames

KINDS = ("tfrecord", "pcr")
_KINDS = {"bytes_list": "bytes", "int64_list": "int64", "float_list": "float"}


class NotAManifest(ValueError):
    """JSON, but not a manifest a tar2tf job wrote (``tar2tf verify`` exits 2)."""


@dataclasses.dataclass
class Problem:
    # file, size, crc32c/sha256/digest, crc, format (ArrayRecord), count, schema, image,
    # index, totals, rejects, pcr
    check: str
    detail: str
    shard: Optional[str] = None
    record: Optional[int] = None  # record number inside the shard, from 0
    key: Optional[str] = None

    def line(self) -> str:
        where = self.shard or "manifest"
        if self.record is not None:
            where += f" record {self.record}"
        if self.key:
            where += f" ({self.key})"
        return f"{self.check:8s} {where}: {self.detail}"


@dataclasses.dataclass
class VerifyReport:
    manifest: str
    kind: str = "tfrecord"
    shards_checked: int = 0
    records_checked: int = 0
    bytes_checked: int = 0
    images_decoded: int = 0
    problems: List[Problem] = dataclasses.field(default_factory=list)
    max_listed_per_shard: int = 20

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> Dict[str, Any]:
        d = dataclasses.asdict(self)
        d["ok"] = self.ok
        return d

    def text(self) -> str:
        # PCR's own words: its files are "record files" that each hold many images
        files, items = ("record files", "images") if self.kind == "pcr" else ("shards", "records")
        lines = [
            f"{'OK' if self.ok else 'MISMATCH'}: {self.manifest} ({self.kind}): "
            f"{self.shards_checked} {files}, {self.records_checked} {items}, "
            f"{self.bytes_checked} bytes"
            + (f", {self.images_decoded} images decoded" if self.images_decoded else "")
        ]
        if self.problems:
            lines.append(f"{len(self.problems)} problem(s):")
            lines.extend("  " + p.line() for p in self.problems)
        return "\n".join(lines)


class _HashingReader:
    """Wraps a binary stream: every byte read also goes into the digest the manifest row
    carries (:mod:`transforms.tfrecord.digests`) and a byte count."""

    def __init__(self, f, row: Dict[str, Any]):
        self.kind = digests.kind_of(row)
        self._f, self.n = f, 0
        self._digest = digests.new(self.kind) if self.kind else None
        # one byte beyond the size the manifest gives is enough to tell the file is longer:
        # a frame whose length field is huge (or an endless file) is never read whole
        size = row.get("bytes")
        self.limit = size + 1 if _is_int(size) and size >= 0 else None

    def read(self, n=-1):
        if self.limit is not None:
            left = max(0, self.limit - self.n)
            n = left if n is None or n < 0 else min(n, left)
        data = self._f.read(n)
        if self._digest is not None:
            self._digest.update(data)
        self.n += len(data)
        return data

    def mismatch(self, row: Dict[str, Any]) -> Optional[str]:
        """What differs when the bytes read do not match the row's digest (the check's
        name is :attr:`kind`); None when they match or the row carries no digest."""
        if self._digest is None:
            return None
        got = digests.hexdigest(self._digest)
        return None if got == row[self.kind] else f"{got}, manifest says {row[self.kind]}"

    def drain(self):
        for _chunk in iter(lambda: self.read(4 << 20), b""):
            pass


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _row_problem(row: Any) -> Optional[str]:
    """Why a manifest row cannot be checked, or None."""
    if not isinstance(row, dict):
        return f"is a JSON {_json_type(row)}, not an object"
    if not isinstance(row.get("path"), str) or not row["path"]:
        return "has no path"
    for name in ("bytes", "records"):
        if not _is_int(row.get(name)) or row[name] < 0:
            return f"{name} is {row.get(name)!r}, not a count"
    return None


def _json_type(v: Any) -> str:
    return {dict: "object", list: "list", str: "string", bool: "boolean"}.get(
        type(v), "number" if isinstance(v, (int, float)) else "null"
    )


def _check_rows(m: Dict[str, Any], report: VerifyReport) -> List[Dict[str, Any]]:
    """The manifest's shard rows that can be checked; a problem listed for each other."""
    shards = m.get("shards", [])
    if not isinstance(shards, list):
        report.problems.append(
            Problem("manifest", f"shards is a JSON {_json_type(shards)}, not a list")
        )
        return []
    good = []
    for i, row in enumerate(shards):
        why = _row_problem(row)
        if why is None:
            good.append(row)
        else:
            report.problems.append(Problem("manifest", f"shard row {i} {why}"))
    return good


def manifest_path_for(target: str) -> str:
    """The manifest for ``target``: a ``*.manifest.json`` as given; a directory holding
    ``PCR.manifest.json`` (a PCR dataset) or exactly one manifest; else the manifest of an
    output template (``out/train-{}.record`` -> ``out/train.record.manifest.json``)."""
    if target.endswith(".manifest.json"):
        return target
    if os.path.isdir(target):
        if os.path.exists(os.path.join(target, "PCR.manifest.json")):
            return os.path.join(target, "PCR.manifest.json")
        found = sorted(n for n in os.listdir(target) if n.endswith(".manifest.json"))
        if len(found) == 1:
            return os.path.join(target, found[0])
    return names.companion(target, ".manifest.json")


def _locate(path: str, manifest_path: str, recorded_manifest: str) -> str:
    """Where to read a file the manifest names: a file written beside the manifest is
    looked for beside it now (so a copied or moved dataset is checked where it is),
    anything else at its recorded path."""
    if dirname(path) == dirname(recorded_manifest):
        return join(dirname(manifest_path), basename(path))
    return path


def _check_example(payload: bytes, schema: Dict[str, Dict[str, Any]], example_pb2) -> tuple:
    """(key, features, problems) of one serialized Example against the schema."""
    ex = example_pb2.Example.FromString(payload)
    feats = ex.features.feature
    key = None
    if "__key__" in feats and feats["__key__"].bytes_list.value:
        key = feats["__key__"].bytes_list.value[0].decode("utf-8", "replace")
    problems = []
    for name, f in feats.items():
        kind = f.WhichOneof("kind")
        dtype = _KINDS.get(kind, "none")
        n = len(getattr(f, kind).value) if kind else 0
        spec = schema.get(name)
        if spec is None:
            problems.append(f"feature {name!r} ({dtype}) is not in the manifest schema")
            continue
        if spec.get("dtype") not in ("mixed", dtype):
            problems.append(f"feature {name!r} is {dtype}, schema says {spec.get('dtype')}")
        shape = spec.get("shape", [-1])
        if shape != [-1] and [n] != shape:
            problems.append(f"feature {name!r} has {n} values, schema says {shape[0]}")
    for name, spec in schema.items():
        if not spec.get("optional") and name not in feats:
            problems.append(f"required feature {name!r} is missing")
    return key, feats, problems


def _decode_images(feats, limit_names=IMAGE_EXTENSIONS) -> tuple:
    from PIL import Image

    done, problems = 0, []
    for name in sorted(feats):
        if name.lower() not in limit_names or feats[name].WhichOneof("kind") != "bytes_list":
            continue
        if (
            f"{name}/dtype" in feats
        ):  # a pixel array stored under the image's name: checked as an array
            bad = _check_array(feats, name)
            done += bad is None
            problems += [bad] if bad else []
            continue
        for value in feats[name].bytes_list.value:
            try:
                with Image.open(io.BytesIO(value)) as im:
                    im.load()
                done += 1
            except Exception as e:
                problems.append(f"feature {name!r} does not decode: {type(e).__name__}: {e}")
    return done, problems


def _check_array(feats, name: str) -> Optional[str]:
    """An array feature (``name`` raw little-endian bytes, ``name/dtype``, ``name/shape``,
    as transforms.tfrecord.example writes a decoded image): its bytes must fill its shape exactly."""
    dtype = feats[f"{name}/dtype"].bytes_list.value
    shape = list(feats[f"{name}/shape"].int64_list.value) if f"{name}/shape" in feats else None
    data = feats[name].bytes_list.value
    if shape is None or len(dtype) != 1:
        return f"array feature {name!r} lacks its {name}/shape or {name}/dtype"
    if dtype[0] in (b"string", b"bool"):
        return None  # elements, not a buffer: the schema check covers their count
    import numpy as np

    try:
        itemsize = np.dtype(dtype[0].decode()).itemsize
    except (TypeError, ValueError, UnicodeDecodeError):
        return f"array feature {name!r} has an unknown dtype {dtype[0]!r}"
    want = itemsize * int(np.prod(shape, dtype=np.int64))
    got = sum(len(v) for v in data)
    if len(data) != 1 or got != want:
        return (
            f"array feature {name!r} ({dtype[0].decode()}, shape {shape}) holds {got} bytes, "
            f"its shape needs {want}"
        )
    return None


def _adder(report: VerifyReport, path: str):
    """``add(check, detail, record=None, key=None)``: a problem of the shard at ``path``,
    listed up to ``report.max_listed_per_shard`` times, then once more as "further"."""
    shown = 0

    def add(check, detail, record=None, key=None):
        nonlocal shown
        shown += 1
        if shown <= report.max_listed_per_shard:
            report.problems.append(Problem(check, detail, path, record, key))
        elif shown == report.max_listed_per_shard + 1:
            report.problems.append(
                Problem(check, "... further problems in this shard not listed", path)
            )

    return add


def _check_record(n, payload, schema, example_pb2, decode_images, report, add) -> None:
    """Record ``n`` of a shard (a serialized Example) against the schema, its images
    decoded when asked."""
    try:
        key, feats, bad = _check_example(payload, schema, example_pb2)
    except Exception as e:
        add("schema", f"not a tf.train.Example: {type(e).__name__}: {e}", n)
        return
    for b in bad:
        add("schema", b, n, key)
    if decode_images:
        done, bad = _decode_images(feats)
        report.images_decoded += done
        for b in bad:
            add("image", b, n, key)


def verify_array_record_shard(
    row: Dict[str, Any],
    path: str,
    schema,
    report: VerifyReport,
    config: StoreConfig,
    decode_images: bool = False,
) -> int:
    """Check one ArrayRecord shard: size and CRC32C of the file against its row, then every
    record read (in order) and checked as :func:`verify_shard` checks a TFRecord's, and
    their count.  A shard in a bucket is copied to a local temporary file first
    (``array_record`` reads local paths); returns the records read."""
    from transforms.arrayrecord import format as arf
    from transforms.tfrecord import example_wire_pb2 as example_pb2

    store = get_store(path, config)
    add = _adder(report, path)
    if not store.exists(path):
        add("file", "shard is missing")
        return 0
    local = split_url(path)[0] == ""
    tmp = None
    try:
        with store.open_read(path) as raw:
            f = _HashingReader(raw, row)
            if local:
                f.drain()
                where = split_url(path)[2]
            else:
                fd, tmp = tempfile.mkstemp(prefix="tar2tf-verify-", suffix=".array_record")
                with os.fdopen(fd, "wb") as out:
                    for chunk in iter(lambda: f.read(4 << 20), b""):
                        out.write(chunk)
                where = tmp
        report.shards_checked += 1
        report.bytes_checked += f.n
        _check_bytes(f, row, add)
        n = 0
        try:
            for payload in arf.iter_file(where):
                _check_record(n, payload, schema, example_pb2, decode_images, report, add)
                n += 1
        except arf.ArrayRecordError as e:
            add("format", str(e), e.record)
    finally:
        if tmp is not None:
            os.unlink(tmp)
    report.records_checked += n
    if n != row["records"]:
        add("count", f"{n} readable records, manifest says {row['records']}")
    return n


def _check_bytes(f: _HashingReader, row: Dict[str, Any], add) -> None:
    """A shard's size and whole-file digest, read through ``f``, against its manifest row."""
    if f.limit is not None and f.n >= f.limit:
        add("size", f"more than {row['bytes']} bytes, manifest says {row['bytes']}")
    elif f.n != row["bytes"]:
        add("size", f"{f.n} bytes, manifest says {row['bytes']}")
    differs = f.mismatch(row)
    if not f.kind:
        add("digest", "manifest row has no crc32c (or sha256)")
    elif differs:
        add(f.kind, differs)


def verify_shard(
    row: Dict[str, Any],
    path: str,
    schema,
    report: VerifyReport,
    config: StoreConfig,
    decode_images: bool = False,
    dali_index: bool = False,
) -> int:
    """Check one shard; append problems to the report; return the records read."""
    from transforms.tfrecord import (
        example_wire_pb2 as example_pb2,
    )  # tf.train.Example's wire format, no TF import

    store = get_store(path, config)
    add = _adder(report, path)
    if not store.exists(path):
        add("file", "shard is missing")
        return 0
    offsets: List[tuple] = []
    with store.open_read(path) as raw:
        f = _HashingReader(raw, row)
        try:
            for n, (offset, payload) in enumerate(iter_frames(f)):
                offsets.append((offset, len(payload) + FRAME_OVERHEAD))
                _check_record(n, payload, schema, example_pb2, decode_images, report, add)
        except CorruptRecordError as e:
            add("crc", f"{e} (after {len(offsets)} good records)", len(offsets))
            f.drain()
    report.shards_checked += 1
    report.records_checked += len(offsets)
    report.bytes_checked += f.n
    _check_bytes(f, row, add)
    if len(offsets) != row["records"]:
        add("count", f"{len(offsets)} readable records, manifest says {row['records']}")
    if dali_index:
        _check_index(path, offsets, store, add)
    return len(offsets)


def _check_file(row: Dict[str, Any], path: str, report: VerifyReport, config: StoreConfig) -> None:
    """Existence, size and digest of a file the manifest lists (PCR record files)."""
    store = get_store(path, config)
    if not store.exists(path):
        report.problems.append(Problem("file", "file is missing", path))
        return
    with store.open_read(path) as raw:
        f = _HashingReader(raw, row)
        f.drain()
    report.shards_checked += 1
    report.bytes_checked += f.n
    if "bytes" in row and f.n != row["bytes"]:
        report.problems.append(Problem("size", f"{f.n} bytes, manifest says {row['bytes']}", path))
    differs = f.mismatch(row)
    if differs:
        report.problems.append(Problem(f.kind, differs, path))


def _check_index(path: str, offsets, store, add) -> None:
    idx = path + ".idx"
    if not store.exists(idx):
        add("index", "DALI index file is missing")
        return
    try:
        rows = [
            tuple(int(x) for x in line.split())
            for line in store.read_bytes(idx).decode().splitlines()
            if line.strip()
        ]
    except ValueError as e:
        add("index", f"DALI index is not 'offset size' lines: {e}")
        return
    if rows != [tuple(o) for o in offsets]:
        first = next(
            (i for i, (a, b) in enumerate(zip(rows, offsets)) if tuple(a) != tuple(b)),
            min(len(rows), len(offsets)),
        )
        add(
            "index",
            f"DALI index differs from the records from entry {first} "
            f"({len(rows)} entries, {len(offsets)} records)",
        )


def _check_totals(
    m: Dict[str, Any],
    report: VerifyReport,
    config: StoreConfig,
    manifest_path: str,
    shards: List[Dict[str, Any]],
) -> None:
    t = m.get("totals", {})
    if not isinstance(t, dict):
        report.problems.append(Problem("totals", f"totals is a JSON {_json_type(t)}"))
        t = {}

    def want(name, actual):
        if name in t and t[name] != actual:
            report.problems.append(
                Problem("totals", f"{name} is {t[name]} but the shards give {actual}")
            )

    listed = m.get("shards")
    if isinstance(listed, list) and len(listed) == len(shards):
        # (with unreadable rows, their problems are listed already: no sums to compare)
        want("shards", len(shards))
        want("records_written", sum(s["records"] for s in shards))
        want("bytes_written", sum(s["bytes"] for s in shards))
    if all(
        _is_int(t.get(k))
        for k in ("records_read", "records_written", "records_rejected", "records_filtered")
    ):
        if (
            t["records_read"]
            != t["records_written"] + t["records_rejected"] + t["records_filtered"]
        ):
            report.problems.append(
                Problem("totals", "records read != written + rejected + filtered")
            )
    rej = m.get("rejects", {})
    rpath = rej.get("path") if isinstance(rej, dict) else None
    if isinstance(rpath, str) and rpath:
        rpath = _locate(
            rpath, manifest_path, names.companion(m.get("output", ""), ".manifest.json")
        )
        store = get_store(rpath, config)
        if not store.exists(rpath):
            report.problems.append(Problem("rejects", f"rejects file {rpath} is missing"))
        else:
            n = sum(1 for line in store.read_bytes(rpath).splitlines() if line.strip())
            if n != rej.get("count", n):
                report.problems.append(
                    Problem("rejects", f"rejects file has {n} lines, manifest says {rej['count']}")
                )


def _verify_pcr(
    m: Dict[str, Any], manifest_path: str, recorded: str, report: VerifyReport, config: StoreConfig
) -> None:
    """``recorded``: where the manifest was written (files beside it are looked for beside
    ``manifest_path`` now, :func:`_locate`)."""
    from transforms.pcr.verify import verify_pcr

    directory = dirname(manifest_path) or "."
    index = m.get("index") or {}
    if index.get("sha256"):
        index_path = _locate(index.get("path", ""), manifest_path, recorded)
        store = get_store(index_path, config)
        if store.exists(index_path):
            data = store.read_bytes(index_path)
            if hashlib.sha256(data).hexdigest() != index["sha256"]:
                report.problems.append(
                    Problem(
                        "index",
                        "PCR index's sha256 differs from the manifest's "
                        f"({len(data)} bytes, manifest says "
                        f"{index.get('bytes')})",
                        index_path,
                    )
                )
    counts: Dict[str, int] = {}
    try:
        found = verify_pcr(directory, config=config, counts=counts)
    except Exception as e:
        report.problems.append(Problem("pcr", f"verify_pcr failed: {type(e).__name__}: {e}"))
        return
    report.records_checked += counts.get("images", 0)
    for p in found:
        report.problems.append(Problem("pcr", str(p)))


def verify(
    target: str, decode_images: bool = False, config: Optional[StoreConfig] = None
) -> VerifyReport:
    """Verify the dataset whose manifest is ``target`` (or belongs to output template ``target``)."""
    config = config or StoreConfig()
    mpath = manifest_path_for(target)
    m = json.loads(get_store(mpath, config).read_bytes(mpath))
    if not isinstance(m, dict):
        report = VerifyReport(manifest=mpath, kind="?")
        report.problems.append(
            Problem("manifest", f"the manifest is a JSON {_json_type(m)}, not an object")
        )
        return report
    if m.get("tool") != "tar2tf" or m.get("kind") not in KINDS:
        said = ", ".join(f"{k} {m.get(k)!r}" for k in ("tool", "kind") if k in m)
        raise NotAManifest(f"not a tar2tf manifest ({said or 'no tool, no kind'})")
    report = VerifyReport(manifest=mpath, kind=m["kind"])
    rows = _check_rows(m, report)
    if not isinstance(m.get("output", ""), str):
        report.problems.append(Problem("manifest", "output is not a string"))
        m = dict(m, output="")
    if report.kind == "pcr":
        recorded = names.companion(m.get("output", "") + "/PCR", ".manifest.json")
        for row in rows:
            path = _locate(row["path"], mpath, recorded)
            _guarded(report, path, _check_file, row, path, report, config)
        _verify_pcr(m, mpath, recorded, report, config)
        return report
    schema = m.get("schema", {})
    if not isinstance(schema, dict) or not all(isinstance(v, dict) for v in schema.values()):
        report.problems.append(Problem("schema", "the manifest's schema is not an object"))
        schema = {}
    for name, spec in sorted(schema.items()):
        if spec.get("dtype") == "mixed":  # a reader's one parser cannot take every record
            report.problems.append(
                Problem(
                    "schema",
                    f"feature {name!r} has mixed types across records "
                    "(schema dtype 'mixed'): no parser reads them all",
                )
            )
    options = m.get("options", {})
    dali = isinstance(options, dict) and bool(options.get("dali_index"))
    array_record = isinstance(options, dict) and options.get("format") == "array_record"
    if array_record:
        report.kind = "array_record"
    recorded = names.companion(m.get("output", ""), ".manifest.json")
    listed = {  # unreadable rows too: their files are not strays
        _locate(r["path"], mpath, recorded)
        for r in (m["shards"] if isinstance(m.get("shards"), list) else [])
        if isinstance(r, dict) and isinstance(r.get("path"), str)
    }
    for row in rows:
        path = _locate(row["path"], mpath, recorded)
        listed.add(path)
        if array_record:
            _guarded(
                report,
                path,
                verify_array_record_shard,
                row,
                path,
                schema,
                report,
                config,
                decode_images,
            )
            continue
        _guarded(
            report,
            path,
            verify_shard,
            row,
            path,
            schema,
            report,
            config,
            decode_images,
            dali,
        )
    output = m.get("output", "")
    if output and output != "<generator>":
        # a shard name the output template makes that the manifest does not list: a stale
        # file of another run, or a shard copied in; a reader globbing the names would take it
        for extra in names.existing_outputs(_locate(output, mpath, recorded), config):
            if extra not in listed:
                report.problems.append(
                    Problem("file", "matches the output template but is not in the manifest", extra)
                )
    _check_totals(m, report, config, mpath, rows)
    return report


def _guarded(report: VerifyReport, path: str, check, *args) -> None:
    """Run one file's ``check``; a file that cannot be read (not a regular file, refused,
    gone, more than memory holds) is a problem listed for it, and the next one is checked."""
    try:
        check(*args)
    except (Exception, MemoryError) as e:
        what = str(e) if isinstance(e, OSError) and str(e) else f"{type(e).__name__}: {e}"
        report.problems.append(Problem("file", f"cannot be read: {what[:300]}", path))
