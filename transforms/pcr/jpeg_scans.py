"""JPEG marker parsing: where each scan of a (progressive) JPEG ends, and scan groups.

A JPEG is a sequence of marker segments (``FF xx`` + 2-byte big-endian length + payload)
from SOI (``FFD8``) to EOI (``FFD9``).  After an SOS segment (``FFDA``) comes entropy-coded
data, which is not length-prefixed: inside it ``FF 00`` is a stuffed data byte, ``FF D0``
to ``FF D7`` are restart markers, and extra ``FF`` bytes are fill; the first other
``FF xx`` is the next marker and ends the scan.  So scans are found by walking segments
and scanning only entropy data -- never by searching for ``FFDA``, which also occurs inside
APP segments (an EXIF thumbnail is a whole JPEG).

Written by hand because no maintained Python library exposes scan byte offsets (Pillow
and the TurboJPEG bindings decode but do not report them); the rules above are the whole
of it (ITU T.81, B.1.1 and F.1.2.3).

PCR pieces (``split_pieces``): piece 1 runs from the start of the file to the end of scan
1's entropy data (so it holds every header), piece i is scan i's marker segments (DHT,
SOS) and data; EOI is dropped, and readers append ``FFD9`` after joining pieces 1..k.

Scan groups (``group_pieces``): libjpeg's default progression script has 10 scans for
YCbCr colour, 6 for grayscale and ``2 + 4 * n`` for other n-component images (CMYK: 18).
A :class:`ScanGroupMap` gathers them into ``SCAN_GROUPS`` = 10 groups so that group k means
the same stage everywhere (the colour script's stages; see docs/pcr.md):

====  ==========================================  ======  =======  =========
group stage                                       colour  gray     n-comp
====  ==========================================  ======  =======  =========
1     DC, all components, coarse (Al=1)           1       1        1
2     luma/all AC 1-5, coarse (Al=2)              2       2        2..n+1
3     Cr AC, coarse                               3       -        -
4     Cb AC, coarse                               4       -        -
5     luma/all AC 6-63, coarse (Al=2)             5       3        n+2..2n+1
6     luma/all AC refinement (Al 2 -> 1)          6       4        2n+2..3n+1
7     DC refinement                               7       5        3n+2
8     Cr AC refinement                            8       -        -
9     Cb AC refinement                            9       -        -
10    luma/all AC last bit                        10      6        3n+3..4n+2
====  ==========================================  ======  =======  =========

Any other scan script uses the ``identity`` map (scan i -> group i, scans past 10 join
group 10).  Every map is non-decreasing, so pieces 1..k always form a JPEG prefix.
"""

from __future__ import annotations

import dataclasses
import struct
from typing import Dict, List, Optional, Tuple

SCAN_GROUPS = 10
EOI = b"\xff\xd9"

_SOI, _EOI, _SOS, _TEM = 0xD8, 0xD9, 0xDA, 0x01
_RST = range(0xD0, 0xD8)
_SOF = set(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}  # DHT, JPG, DAC are not frames


class JpegError(ValueError):
    """The bytes are not a JPEG this parser can split (the message says why)."""


@dataclasses.dataclass(frozen=True)
class Scan:
    start: int  # offset of the first marker segment belonging to the scan
    sos: int  # offset of its SOS marker
    end: int  # offset just past its entropy-coded data
    components: Tuple[int, ...]  # component indexes (0-based, frame order) in the scan
    ss: int
    se: int
    ah: int
    al: int

    @property
    def signature(self) -> Tuple[Tuple[int, ...], int, int, int, int]:
        return (self.components, self.ss, self.se, self.ah, self.al)


@dataclasses.dataclass(frozen=True)
class JpegLayout:
    width: int
    height: int
    components: int
    progressive: bool
    adobe_transform: Optional[int]  # APP14 "Adobe" colour transform flag, if present
    scans: Tuple[Scan, ...]
    eoi: int  # offset of the EOI marker

    @property
    def colour(self) -> str:
        if self.components == 1:
            return "gray"
        if self.components == 3 and self.adobe_transform != 0:
            return "ycbcr"
        return f"{self.components}comp"


def parse(data: bytes) -> JpegLayout:
    """Walk the marker segments of ``data``; raise :class:`JpegError` on malformed input."""
    n = len(data)
    if n < 4 or data[0] != 0xFF or data[1] != _SOI:
        raise JpegError("not a JPEG: no SOI marker")
    pos, seg_start = 2, 2
    frame: Optional[Tuple[int, int, List[int], bool]] = None
    adobe: Optional[int] = None
    scans: List[Scan] = []
    while True:
        if pos >= n:
            raise JpegError(f"truncated JPEG: no EOI marker (ends at byte {n})")
        if data[pos] != 0xFF:
            raise JpegError(
                f"corrupt JPEG: expected a marker at byte {pos}, found 0x{data[pos]:02x}"
            )
        while pos + 1 < n and data[pos + 1] == 0xFF:  # fill bytes before a marker
            pos += 1
        if pos + 1 >= n:
            raise JpegError("truncated JPEG: ends inside a marker")
        marker = data[pos + 1]
        if marker == _EOI:
            break
        if marker in _RST or marker in (_TEM, _SOI):
            pos += 2
            continue
        if pos + 4 > n:
            raise JpegError(f"truncated JPEG: marker 0x{marker:02x} at byte {pos} has no length")
        (length,) = struct.unpack_from(">H", data, pos + 2)
        body, nxt = pos + 4, pos + 2 + length
        if length < 2 or nxt > n:
            raise JpegError(
                f"truncated JPEG: segment 0x{marker:02x} at byte {pos} runs past the end"
            )
        if marker in _SOF:
            frame = _parse_frame(data, body, nxt, marker)
        elif marker == 0xEE and data[body : body + 5] == b"Adobe" and length >= 14:
            adobe = data[body + 11]
        elif marker == _SOS:
            if frame is None:
                raise JpegError(f"corrupt JPEG: scan at byte {pos} before any frame header")
            end = _entropy_end(data, nxt)
            scans.append(_parse_scan(data, body, nxt, seg_start, pos, end, frame[2]))
            pos = seg_start = end
            continue
        pos = nxt
    if frame is None or not scans:
        raise JpegError("corrupt JPEG: no frame header or no scan")
    width, height, ids, progressive = frame
    return JpegLayout(width, height, len(ids), progressive, adobe, tuple(scans), pos)


def _parse_frame(data: bytes, body: int, nxt: int, marker: int):
    if nxt - body < 6:
        raise JpegError("corrupt JPEG: short frame header")
    _, height, width, ncomp = struct.unpack_from(">BHHB", data, body)
    if nxt - body < 6 + 3 * ncomp or ncomp == 0:
        raise JpegError("corrupt JPEG: frame header lists more components than it holds")
    ids = [data[body + 6 + 3 * i] for i in range(ncomp)]
    return width, height, ids, marker in (0xC2, 0xC6, 0xCA, 0xCE)


def _parse_scan(data, body, nxt, seg_start, sos, end, frame_ids) -> Scan:
    ns = data[body] if body < nxt else 0
    if ns == 0 or nxt - body < 1 + 2 * ns + 3:
        raise JpegError(f"corrupt JPEG: bad scan header at byte {sos}")
    comps = []
    for i in range(ns):
        cid = data[body + 1 + 2 * i]
        if cid not in frame_ids:
            raise JpegError(f"corrupt JPEG: scan at byte {sos} names unknown component {cid}")
        comps.append(frame_ids.index(cid))
    p = body + 1 + 2 * ns
    ss, se, a = data[p], data[p + 1], data[p + 2]
    return Scan(seg_start, sos, end, tuple(comps), ss, se, a >> 4, a & 0x0F)


def _entropy_end(data: bytes, pos: int) -> int:
    """Offset of the first marker after entropy-coded data starting at ``pos``."""
    n = len(data)
    while True:
        i = data.find(b"\xff", pos)  # bytes.find is C-speed; the loop only visits FF bytes
        if i < 0 or i + 1 >= n:
            raise JpegError("truncated JPEG: entropy-coded data runs to the end of the file")
        nxt = data[i + 1]
        if nxt == 0x00 or nxt in _RST:  # stuffed byte or restart marker: still in the scan
            pos = i + 2
        elif nxt == 0xFF:  # fill byte: the marker starts at a later FF
            pos = i + 1
        else:
            return i


def split_pieces(data: bytes, layout: Optional[JpegLayout] = None) -> List[bytes]:
    """One piece per scan, cut at scan ends; EOI (and anything after it) dropped.

    Raises :class:`JpegError` if marker segments sit between the last scan and EOI
    (they would be lost), which the jpegtran output never has.
    """
    layout = layout or parse(data)
    if layout.scans[-1].end != layout.eoi:
        raise JpegError("unsupported JPEG: marker segments between the last scan and EOI")
    cuts = [0] + [s.end for s in layout.scans]
    return [data[a:b] for a, b in zip(cuts, cuts[1:])]


# -- scan groups ------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ScanGroupMap:
    name: str
    components: int
    group_of_scan: Tuple[int, ...]
    description: str


def _default_script(ncomp: int, ycbcr: bool) -> List[Tuple[Tuple[int, ...], int, int, int, int]]:
    """libjpeg's ``jpeg_simple_progression`` scan signatures (components, Ss, Se, Ah, Al)."""
    everyone = tuple(range(ncomp))
    if ycbcr:
        return [
            (everyone, 0, 0, 0, 1),
            ((0,), 1, 5, 0, 2),
            ((2,), 1, 63, 0, 1),
            ((1,), 1, 63, 0, 1),
            ((0,), 6, 63, 0, 2),
            ((0,), 1, 63, 2, 1),
            (everyone, 0, 0, 1, 0),
            ((2,), 1, 63, 1, 0),
            ((1,), 1, 63, 1, 0),
            ((0,), 1, 63, 1, 0),
        ]
    each = [(c,) for c in range(ncomp)]
    return (
        [(everyone, 0, 0, 0, 1)]
        + [(c, 1, 5, 0, 2) for c in each]
        + [(c, 6, 63, 0, 2) for c in each]
        + [(c, 1, 63, 2, 1) for c in each]
        + [(everyone, 0, 0, 1, 0)]
        + [(c, 1, 63, 1, 0) for c in each]
    )


def _generic_groups(ncomp: int) -> Tuple[int, ...]:
    return tuple([1] + [2] * ncomp + [5] * ncomp + [6] * ncomp + [7] + [10] * ncomp)


MAPS: Dict[str, ScanGroupMap] = {
    m.name: m
    for m in (
        ScanGroupMap(
            "ycbcr-10",
            3,
            tuple(range(1, 11)),
            "libjpeg default script for YCbCr colour: scan k is group k",
        ),
        ScanGroupMap(
            "gray-6",
            1,
            _generic_groups(1),
            "grayscale default script: groups 3, 4, 8, 9 (chroma stages) are empty",
        ),
        ScanGroupMap(
            "4comp-18",
            4,
            _generic_groups(4),
            "CMYK/YCCK default script: each stage's per-component scans share one group; "
            "groups 3, 4, 8, 9 are empty",
        ),
        ScanGroupMap(
            "identity",
            0,
            (),
            "any other script: scan k is group k, scans past the last group join it",
        ),
    )
}


def scan_map_for(layout: JpegLayout) -> ScanGroupMap:
    """The map whose default script matches the layout's scans, else ``identity``."""
    sigs = [s.signature for s in layout.scans]
    ycbcr = layout.colour == "ycbcr"
    if sigs == _default_script(layout.components, ycbcr):
        if ycbcr:
            return MAPS["ycbcr-10"]
        name = "gray-6" if layout.components == 1 else f"{layout.components}comp-{len(sigs)}"
        return MAPS.get(name) or ScanGroupMap(
            name,
            layout.components,
            _generic_groups(layout.components),
            f"default script for {layout.components} components",
        )
    return MAPS["identity"]


def group_of_scans(scan_map: ScanGroupMap, nscans: int, groups: int = SCAN_GROUPS) -> List[int]:
    if scan_map.group_of_scan and len(scan_map.group_of_scan) == nscans:
        return list(scan_map.group_of_scan)
    return [min(i + 1, groups) for i in range(nscans)]


def group_pieces(
    data: bytes, groups: int = SCAN_GROUPS
) -> Tuple[List[bytes], ScanGroupMap, JpegLayout]:
    """Split a progressive JPEG into ``groups`` pieces (some may be empty) + the map used."""
    layout = parse(data)
    pieces = split_pieces(data, layout)
    smap = scan_map_for(layout)
    out: List[List[bytes]] = [[] for _ in range(groups)]
    for piece, g in zip(pieces, group_of_scans(smap, len(pieces), groups)):
        out[g - 1].append(piece)
    return [b"".join(p) for p in out], smap, layout
