"""``verify_pcr(directory)``: check a PCR dataset's record files against its index.

``tar2tf verify DIR/PCR.manifest.json`` calls it for manifests of kind ``pcr``.  It reads
every chunk once (streaming, one chunk in memory at a time) and returns a list of
problems, each naming the file; an empty list means the dataset is sound.
"""

from __future__ import annotations

import hashlib
from typing import Dict, List, Optional

import google_crc32c
from google.protobuf.message import DecodeError

from transforms.pcr import format as fmt
from transforms.pcr import pcr_pb2
from transforms.stores import StoreConfig, basename, get_store, join


def verify_pcr(
    directory: str, config: Optional[StoreConfig] = None, counts: Optional[Dict[str, int]] = None
) -> List[str]:
    """Check every record file against the index; return the problems found (empty = ok).

    Checks: the index parses; its two offset lists (the reference's int32 ``offsets``, read
    by readers of the original schema, and tar2tf's ``offsets64``) agree, and its
    ``scan_groups`` matches every entry; each indexed file exists and its size equals the
    sum of its chunk lengths; CRC-32C of every chunk (when the index has them); every chunk
    parses, the metadata's level count matches the index, every scan group has one entry per
    label, piece sizes and the sha256 (when present) match, every image's scan map is in the
    index; no record file is missing from the index.  ``counts`` (a dict) gets ``images``
    and ``records`` (files) added up.
    """
    problems: List[str] = []
    index_path = join(directory, fmt.INDEX_NAME)
    store = get_store(index_path, config)
    try:
        idx, entries = fmt.read_index(index_path, config)
    except FileNotFoundError:
        return [f"{index_path}: missing"]
    except DecodeError as e:
        return [f"{index_path}: does not parse: {e}"]
    problems.extend(_check_index(idx, entries))
    maps = {m.name for m in idx.scan_maps}
    counts = counts if counts is not None else {}
    for entry in entries.values():
        problems.extend(
            _verify_record(join(directory, entry.name), entry, idx, config, maps, counts)
        )
    on_disk = {
        basename(u)
        for u in store.list(join(directory, "PCR_"))
        if fmt.RECORD_RE.match(basename(u)) and u == join(directory, basename(u))
    }
    for name in sorted(on_disk - set(entries)):
        problems.append(f"{name}: record file not in the index")
    return problems


def _check_index(idx, entries: Dict[str, fmt.RecordEntry]) -> List[str]:
    out = []
    for r in idx.records:
        if len(r.offsets) and len(r.offsets64) and list(r.offsets) != list(r.offsets64):
            out.append(
                f"{fmt.INDEX_NAME}: {r.name}: offsets {list(r.offsets)} differ from offsets64 "
                f"{list(r.offsets64)} (readers of the reference schema use the first)"
            )
    if idx.scan_groups:
        for e in entries.values():
            if e.groups != idx.scan_groups:
                out.append(
                    f"{fmt.INDEX_NAME}: {e.name} has {e.groups} scan groups, the index says "
                    f"{idx.scan_groups}"
                )
    return out


def _verify_record(path: str, entry: fmt.RecordEntry, idx, config, maps, counts) -> List[str]:
    name, out = entry.name, []
    store = get_store(path, config)
    try:
        size = store.size(path)
    except FileNotFoundError:
        return [f"{name}: indexed but missing"]
    if size != entry.size:
        return [f"{name}: {size} bytes, index says {entry.size}"]
    if entry.crcs and len(entry.crcs) != len(entry.lengths):
        out.append(f"{name}: index has {len(entry.crcs)} CRCs for {len(entry.lengths)} chunks")
    digest = hashlib.sha256()
    meta = None
    with store.open_read(path) as f:
        for c, length in enumerate(entry.lengths):
            chunk = f.read(length)
            digest.update(chunk)
            if entry.crcs and c < len(entry.crcs) and google_crc32c.value(chunk) != entry.crcs[c]:
                out.append(f"{name}: chunk {c} CRC-32C mismatch")
                continue
            try:
                if c == 0:
                    meta = pcr_pb2.MetadataRecord.FromString(chunk)
                    out.extend(_check_meta(name, meta, entry, maps))
                    counts["records"] = counts.get("records", 0) + 1
                    counts["images"] = counts.get("images", 0) + len(meta.labels)
                elif meta is not None:
                    sg = pcr_pb2.ScanGroup.FromString(chunk)
                    out.extend(_check_group(name, c, sg, meta))
            except DecodeError as e:
                out.append(f"{name}: chunk {c} does not parse: {e}")
    sha = next((r.sha256 for r in idx.records if r.name == name), "")
    if sha and sha != digest.hexdigest():
        out.append(f"{name}: sha256 mismatch")
    return out


def _check_meta(name: str, meta, entry: fmt.RecordEntry, maps) -> List[str]:
    out = []
    unknown = sorted({im.scan_map for im in meta.images if im.scan_map} - maps)
    if unknown:
        out.append(f"{name}: images use scan maps {unknown} that the index does not describe")
    if meta.progressive_levels != entry.groups:
        out.append(
            f"{name}: metadata says {meta.progressive_levels} scan groups, index {entry.groups}"
        )
    if entry.num_images is not None and entry.num_images != len(meta.labels):
        out.append(f"{name}: {len(meta.labels)} labels, index says {entry.num_images} images")
    if len(meta.images) and len(meta.images) != len(meta.labels):
        out.append(f"{name}: {len(meta.images)} image infos for {len(meta.labels)} labels")
    return out


def _check_group(name: str, g: int, sg, meta) -> List[str]:
    n = len(meta.labels)
    if len(sg.image_bytes) != n:
        return [f"{name}: scan group {g} has {len(sg.image_bytes)} pieces for {n} images"]
    out = []
    for i, info in enumerate(meta.images):
        if len(info.piece_sizes) >= g and info.piece_sizes[g - 1] != len(sg.image_bytes[i]):
            out.append(
                f"{name}: image {i} ({info.key}) piece {g} is {len(sg.image_bytes[i])} bytes, "
                f"metadata says {info.piece_sizes[g - 1]}"
            )
    return out
