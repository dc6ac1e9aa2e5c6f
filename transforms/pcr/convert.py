"""PCR inputs and the per-unit conversion work (plain functions; Beam calls them).

Inputs come in *units*, each converted by one worker into one work *blob*:

* ``("tar", i, url, url)``: one tar shard, read through :func:`transforms.tar.fetch.read_shard`
  (local, ``ais://``, ``gs://``); the image is the record's first image extension (or
  ``image_field``), the label the integer in ``label_field`` (default ``cls``).
* ``("files", i, root, [[url, key, label], ...])``: a slice of an ImageFolder tree
  ``root/<class>/<image>`` (labels = positions of the sorted class names, keys = paths
  relative to root, files in sorted order).

For every accepted image the blob gets its ``SCAN_GROUPS`` pieces back to back; the
returned info (JSON-able) lists per image its key, label, piece sizes, blob offset and
provenance, plus the rejects and counts of the unit.  A custom scan script comes as its text
(``scan_script``) and goes to jpegtran through a file local to the worker.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from transforms.ops.image_names import IMAGE_EXTENSIONS
from transforms.pcr.image import DEFAULT_QUALITY, ImageRejected, to_progressive
from transforms.pcr.jpeg_scans import SCAN_GROUPS, JpegError, group_pieces
from transforms.pcr.scan_script import local_file
from transforms.record_types import KEY, Record, Reject, is_reject
from transforms.stores import StoreConfig, get_store, join, split_url
from transforms.stores.errors import FetchError
from transforms.tar.damage import ShardCorrupt
from transforms.tar.fetch import read_shard

INT32 = range(-(2**31), 2**31)


# -- listing ------------------------------------------------------------------------------


def list_image_folder(root: str, config: Optional[StoreConfig] = None, files_per_unit: int = 64):
    """(units, classes, skipped) for ``root/<class>/.../<file>``; hidden names are skipped,
    as are files directly under root (they belong to no class)."""
    root = root.rstrip("/")
    files: List[Tuple[str, str, str]] = []  # (class, key, url)
    skipped = 0
    for url in get_store(root + "/", config).list(root + "/"):
        rel = url[len(root) + 1 :]
        parts = rel.split("/")
        if any(p.startswith(".") for p in parts):
            continue
        if len(parts) < 2:
            skipped += 1
            continue
        files.append((parts[0], rel, url))
    classes = sorted({c for c, _, _ in files})
    label = {c: i for i, c in enumerate(classes)}
    files.sort(key=lambda f: (f[0], f[1]))
    rows = [[url, key, label[c]] for c, key, url in files]
    units = [
        ("files", i // files_per_unit, root, rows[i : i + files_per_unit])
        for i in range(0, len(rows), files_per_unit)
    ]
    return units, classes, skipped


def is_image_folder(source: Union[str, Sequence[str]]) -> bool:
    import os

    if not isinstance(source, str):
        source = source[0] if len(source) == 1 else ""
    return bool(source) and split_url(source)[0] == "" and os.path.isdir(source)


# -- one image ----------------------------------------------------------------------------


def convert_image(data: bytes, quality: int = DEFAULT_QUALITY, scans: Optional[str] = None):
    """(pieces, fields) for one image; raises ImageRejected / JpegError.  ``scans``: a local
    jpegtran scan-script file for 3-component images."""
    prog = to_progressive(data, quality, scans)
    pieces, smap, layout = group_pieces(prog.data, SCAN_GROUPS)
    fields = {
        "scan_map": smap.name,
        "orientation": prog.orientation,
        "lossless": prog.lossless,
        "source_format": prog.source_format,
        "width": layout.width,
        "height": layout.height,
        "components": layout.components,
    }
    return pieces, fields, (smap.name, smap.components, list(smap.group_of_scan), smap.description)


def parse_label(value: Any) -> int:
    if isinstance(value, bytes):
        value = value.decode("utf-8", "strict")
    label = int(str(value).strip())
    if label not in INT32:
        raise ValueError(f"{label} does not fit int32")
    return label


def _pick_image(
    record: Record, image_field: Optional[str]
) -> Tuple[Optional[str], Optional[bytes]]:
    if image_field:
        return image_field, record.get(image_field)
    for ext in IMAGE_EXTENSIONS:  # the first a record has is its image
        if ext in record:
            return ext, record[ext]
    return None, None


def tar_items(
    url: str,
    config: Optional[StoreConfig],
    image_field: Optional[str],
    label_field: str,
    corrupt: List[Reject],
) -> Iterator[Union[Reject, Tuple[str, int, bytes]]]:
    """(key, label, image bytes) per record of a shard, or rejects."""
    for item in read_shard(url, config):
        if isinstance(item, ShardCorrupt):
            corrupt.append(item)
            continue
        if is_reject(item):
            yield item
            continue
        key = item[KEY]
        if not key.isascii() and not _utf8(key):
            # the PCR index holds keys as protobuf strings, which must be UTF-8 (a TFRecord
            # conversion keeps such a name's bytes in its bytes-valued __key__)
            yield Reject(
                url, key, "encode", "key is not UTF-8: a PCR index stores keys as UTF-8 text"
            )
            continue
        field, data = _pick_image(item, image_field)
        if data is None:
            yield Reject(
                url,
                key,
                "encode",
                f"no image: record has no {image_field or '/'.join(IMAGE_EXTENSIONS)} field",
            )
            continue
        if label_field not in item:
            yield Reject(url, key, "encode", f"no label: record has no {label_field!r} field")
            continue
        try:
            label = parse_label(item[label_field])
        except (ValueError, UnicodeDecodeError) as e:
            yield Reject(
                url, key, "encode", f"bad label: {label_field}={item[label_field]!r:.40}: {e}"
            )
            continue
        yield key, label, data


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
        return True
    except UnicodeEncodeError:  # a surrogate-escaped byte of a name that is no UTF-8
        return False


def file_items(rows, config: Optional[StoreConfig], shard: str):
    for url, key, label in rows:
        try:
            data = get_store(url, config).read_bytes(url)
        except Exception as e:
            # a failed read names the file, the byte and the error itself (a local EIO too)
            why = str(e) if isinstance(e, FetchError) else f"{e.__class__.__name__}: {e}"
            yield Reject(shard, key, "fetch", f"unreadable file: {why}")
            continue
        yield key, label, data


# -- one unit -----------------------------------------------------------------------------


def unit_id(unit) -> str:
    """What a unit is made of (its kind, index, source and, for an ImageFolder slice, every
    file with its key and label), as a digest: a blob kept by an interrupted run is reused
    only for the same unit (an image added to or removed from the folder shifts later
    slices, and a new class shifts labels)."""
    return hashlib.sha256(json.dumps(list(unit), separators=(",", ":")).encode()).hexdigest()[:32]


def unit_blob(work: str, unit) -> str:
    """Where ``unit``'s converted pieces go (and, beside it, the pipeline's sidecar)."""
    return join(work, f"unit-{unit[1]:06d}.bin")


def convert_unit(
    unit,
    work: str,
    config: Optional[StoreConfig] = None,
    quality: int = DEFAULT_QUALITY,
    image_field: Optional[str] = None,
    label_field: str = "cls",
    scan_script: Optional[str] = None,
    blob: Optional[str] = None,
) -> Dict[str, Any]:
    """``unit`` converted into ``blob`` (default :func:`unit_blob`; a job names each
    attempt's blob apart); its description."""
    kind, index, shard, what = unit
    scans = local_file(scan_script) if scan_script else None
    blob = blob or unit_blob(work, unit)
    corrupt: List[Reject] = []
    items = (
        tar_items(what, config, image_field, label_field, corrupt)
        if kind == "tar"
        else file_items(what, config, shard)
    )
    images: List[Dict[str, Any]] = []
    rejects: List[Dict[str, Any]] = []
    maps: Dict[str, Any] = {}
    read, offset = 0, 0
    digest = hashlib.sha256()
    store = get_store(blob, config)
    with store.open_write(blob, durable=False) as f:  # scratch: resume re-hashes it
        for item in items:
            if is_reject(item):
                rejects.append(item.to_dict())
                read += item.counts_record
                continue
            read += 1
            key, label, data = item
            try:
                pieces, fields, smap = convert_image(data, quality, scans)
            except (ImageRejected, JpegError) as e:
                rejects.append(Reject(shard, key, "encode", str(e)).to_dict())
                continue
            maps[smap[0]] = smap
            sizes = [len(p) for p in pieces]
            for p in pieces:
                f.write(p)
                digest.update(p)
            images.append(
                {"key": key, "label": label, "piece_sizes": sizes, "offset": offset, **fields}
            )
            offset += sum(sizes)
    if corrupt:
        # integrity check failed after the records were read: none of them can be trusted
        rejects.append(corrupt[0].to_dict())
        reason = f"corrupt shard: {corrupt[0].reason}; record content unreliable"
        rejects.extend(Reject(shard, im["key"], "tar", reason).to_dict() for im in images)
        images = []
    return {
        "index": index,
        "kind": kind,
        "shard": shard,
        "blob": blob,
        "images": images,
        "sizes": [sum(im["piece_sizes"]) for im in images],
        "records_read": read,
        "filtered": 0,
        "rejects": rejects,
        "maps": maps,
        "sha256": digest.hexdigest(),
        "unit": unit_id(unit),
    }
