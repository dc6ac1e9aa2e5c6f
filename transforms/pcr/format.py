"""PCR record files and their index: layout, writing, reading a prefix.

A dataset directory holds ``PCR_index.pb`` and record files ``PCR_<i>.db`` (``.pcr`` is
read too).  A record file of N images is the concatenation, with no framing, of

    chunk 0  MetadataRecord  labels[N], progressive_levels = P, version = 1, images[N]
    chunk g  ScanGroup       image_bytes[N] = piece g of every image, record order (g = 1..P)

and its index entry gives the chunk lengths ``[L_0, L_1 .. L_P]`` (int32 ``offsets`` as in
the reference, plus int64 ``offsets64``) and a CRC-32C per chunk.  Reading scan groups
1..k of a record reads the single prefix ``L_0 + L_1 + ... + L_k`` of its file; an image
at level k is ``piece_1 + ... + piece_k + FFD9``.  Messages: ``transforms/pcr/pcr.proto``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import google_crc32c

from transforms.pcr import pcr_pb2
from transforms.pcr.jpeg_scans import EOI, SCAN_GROUPS, ScanGroupMap
from transforms.stores import StoreConfig, basename, get_store, join, split_url

INDEX_NAME = "PCR_index.pb"
RECORD_RE = re.compile(r"PCR_(\d+)\.(db|pcr)\Z")
VERSION = 1  # MetadataRecord.version: ScanGroup chunks are protobufs
INT32_LIMIT = 2**31  # the reference reader sums int32 lengths


def record_name(i: int, ext: str = ".db") -> str:
    return f"PCR_{i}{ext}"


@dataclasses.dataclass
class PcrImage:
    """One converted image, ready to be placed in a record."""

    key: str
    label: int
    pieces: List[bytes]  # SCAN_GROUPS pieces (some may be empty)
    scan_map: str = ""
    orientation: int = 1
    lossless: bool = True
    source_format: str = ""
    width: int = 0
    height: int = 0
    components: int = 0

    def info(self) -> pcr_pb2.ImageInfo:
        return pcr_pb2.ImageInfo(
            key=self.key,
            piece_sizes=[len(p) for p in self.pieces],
            scan_map=self.scan_map,
            orientation=self.orientation,
            lossless=self.lossless,
            source_format=self.source_format,
            width=self.width,
            height=self.height,
            components=self.components,
        )


def _ser(msg) -> bytes:
    return msg.SerializeToString(deterministic=True)


def build_chunks(images: Sequence[PcrImage], groups: int = SCAN_GROUPS) -> List[bytes]:
    """The chunks of one record file: metadata, then scan groups 1..groups."""
    meta = pcr_pb2.MetadataRecord(
        labels=[im.label for im in images],
        progressive_levels=groups,
        version=VERSION,
        images=[im.info() for im in images],
    )
    chunks = [_ser(meta)]
    for g in range(groups):
        chunks.append(_ser(pcr_pb2.ScanGroup(image_bytes=[im.pieces[g] for im in images])))
    return chunks


def index_entry(name: str, chunks: Sequence[bytes], num_images: int) -> pcr_pb2.RecordOffsetsIndex:
    lengths = [len(c) for c in chunks]
    digest = hashlib.sha256()
    for c in chunks:
        digest.update(c)
    return pcr_pb2.RecordOffsetsIndex(
        name=name,
        offsets=lengths if sum(lengths) < INT32_LIMIT else [],
        offsets64=lengths,
        crc32c=[google_crc32c.value(c) for c in chunks],
        num_images=num_images,
        sha256=digest.hexdigest(),
    )


def write_record(
    path: str,
    images: Sequence[PcrImage],
    config: Optional[StoreConfig] = None,
    groups: int = SCAN_GROUPS,
) -> pcr_pb2.RecordOffsetsIndex:
    """Write one record file atomically (temp name, then rename) and return its index entry."""
    chunks = build_chunks(images, groups)
    with get_store(path, config).open_write(path) as f:
        for c in chunks:
            f.write(c)
    return index_entry(basename(path), chunks, len(images))


def build_index(
    entries: Iterable[pcr_pb2.RecordOffsetsIndex],
    groups: int = SCAN_GROUPS,
    maps: Iterable[ScanGroupMap] = (),
    tool_version: str = "",
    scan_script: str = "",
) -> bytes:
    """``scan_script``: the text of a custom jpegtran scan script (empty: the standard one)."""
    idx = pcr_pb2.DatasetOffsetsIndex(
        records=list(entries),
        scan_groups=groups,
        tool_version=tool_version,
        scan_script=scan_script,
    )
    for m in maps:
        idx.scan_maps.add(
            name=m.name,
            components=m.components,
            group_of_scan=m.group_of_scan,
            description=m.description,
        )
    return _ser(idx)


# -- reading ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class RecordEntry:
    name: str
    lengths: Tuple[int, ...]  # [L_meta, L_1 .. L_P]
    crcs: Tuple[int, ...]  # empty for reference files
    num_images: Optional[int]

    @property
    def groups(self) -> int:
        return len(self.lengths) - 1

    def prefix(self, k: int) -> int:
        """Bytes to read for scan groups 1..k (k past the last group means all of them)."""
        return sum(self.lengths[: 1 + max(0, min(k, self.groups))])

    @property
    def size(self) -> int:
        return sum(self.lengths)


def parse_index(data: bytes) -> Tuple[pcr_pb2.DatasetOffsetsIndex, Dict[str, RecordEntry]]:
    """The index message and its entries by name.  A name listed more than once (the
    reference converter repeated every entry once per scan group) keeps its first entry."""
    idx = pcr_pb2.DatasetOffsetsIndex.FromString(data)
    entries: Dict[str, RecordEntry] = {}
    for r in idx.records:
        if r.name in entries:
            continue
        lengths = tuple(r.offsets64) if len(r.offsets64) else tuple(r.offsets)
        # num_images is a tar2tf field: only meaningful when the entry has other tar2tf fields
        entries[r.name] = RecordEntry(
            r.name, lengths, tuple(r.crc32c), r.num_images if len(r.offsets64) else None
        )
    return idx, entries


def read_index(path: str, config: Optional[StoreConfig] = None):
    return parse_index(get_store(path, config).read_bytes(path))


def lookup(entries: Dict[str, RecordEntry], filename: str) -> RecordEntry:
    """The index entry of a record file: by basename, then by the full name."""
    for name in (basename(filename), filename):
        if name in entries:
            return entries[name]
    raise KeyError(f"{filename} is not in the PCR index")


def open_exact(url: str, config: Optional[StoreConfig] = None):
    """A reader that fetches no byte the caller does not ask for: local files unbuffered
    (the store's buffered reader would read ahead past the prefix), others via the store."""
    scheme, _, path = split_url(url)
    if scheme == "":
        return open(path, "rb", buffering=0)
    return get_store(url, config).open_read(url)


def read_prefix(url: str, nbytes: int, config: Optional[StoreConfig] = None, opener=None) -> bytes:
    """Exactly the first ``nbytes`` of a file: sequential reads, nothing after it."""
    f = opener(url) if opener is not None else open_exact(url, config)
    with f:
        parts, left = [], nbytes
        while left:
            b = f.read(left)
            if not b:
                raise IOError(f"{url}: file ends {left} bytes before the indexed prefix")
            parts.append(b)
            left -= len(b)
    return b"".join(parts)


def parse_groups(buf: bytes, entry: RecordEntry, k: int):
    """(metadata, pieces) from a record prefix holding scan groups 1..k (k is clamped);
    ``pieces[i]`` lists image i's pieces 1..k (a group shorter than the label list, which
    only a damaged or foreign file has, gives empty pieces)."""
    k = max(1, min(k, entry.groups))
    off = entry.lengths[0]
    meta = pcr_pb2.MetadataRecord.FromString(buf[:off])
    n = len(meta.labels)
    pieces: List[List[bytes]] = [[] for _ in range(n)]
    for g in range(1, k + 1):
        chunk = buf[off : off + entry.lengths[g]]
        off += entry.lengths[g]
        group = pcr_pb2.ScanGroup.FromString(chunk).image_bytes
        for i in range(n):
            pieces[i].append(group[i] if i < len(group) else b"")
    return meta, pieces


def parse_prefix(buf: bytes, entry: RecordEntry, k: int):
    """(metadata, jpegs): image i at level k is its pieces 1..k joined, plus EOI."""
    meta, pieces = parse_groups(buf, entry, k)
    return meta, [b"".join(p) + EOI for p in pieces]


def record_files(directory: str, config: Optional[StoreConfig] = None) -> List[str]:
    """Record files of a dataset directory in index order."""
    index_path = join(directory, INDEX_NAME)
    idx, _ = read_index(index_path, config)
    seen, out = set(), []
    for r in idx.records:
        if r.name not in seen:
            seen.add(r.name)
            out.append(join(directory, r.name))
    return out
