"""JPEG marker parsing, scan pieces and scan-group maps, on real (small) photos."""

import struct
import subprocess

import numpy as np
import pytest
from support.pcr_fixtures import decode, encode, jpeg_of, photo, requires_jpegtran

from transforms.pcr import jpeg_scans as js
from transforms.pcr.image import to_progressive

pytestmark = requires_jpegtran


def progressive(img, **kw):
    return to_progressive(encode(img, **kw)).data


def app_segment(marker: int, payload: bytes) -> bytes:
    return bytes([0xFF, marker]) + struct.pack(">H", len(payload) + 2) + payload


def test_colour_gray_cmyk_scripts_and_maps():
    cases = [("RGB", 3, 10, "ycbcr-10"), ("L", 1, 6, "gray-6"), ("CMYK", 4, 18, "4comp-18")]
    for mode, comps, nscans, name in cases:
        data = progressive(photo("chelsea", (64, 48), mode))
        layout = js.parse(data)
        assert layout.progressive and layout.components == comps and len(layout.scans) == nscans
        pieces, smap, _ = js.group_pieces(data)
        assert smap.name == name and len(pieces) == js.SCAN_GROUPS
        # pieces tile the file exactly, minus EOI
        assert b"".join(pieces) + js.EOI == data
        if mode != "RGB":
            assert pieces[2] == pieces[3] == pieces[7] == pieces[8] == b""  # chroma stages
        # group k means the same stage: group 1 is the DC scan, group 7 the DC refinement
        first = [s for s in layout.scans if s.ss == 0 and s.ah == 0]
        refine = [s for s in layout.scans if s.ss == 0 and s.ah > 0]
        assert len(first) == len(refine) == 1
        g = js.group_of_scans(smap, nscans)
        assert g[layout.scans.index(first[0])] == 1 and g[layout.scans.index(refine[0])] == 7
        assert g == sorted(g), "a map must never decrease (pieces 1..k must be a prefix)"


def test_piece_one_holds_headers_and_first_scan_only():
    data = progressive(photo("astronaut", (64, 48)))
    layout = js.parse(data)
    pieces = js.split_pieces(data, layout)
    assert pieces[0].startswith(b"\xff\xd8")
    assert pieces[0].count(b"\xff\xda") == 1 and len(pieces[0]) == layout.scans[0].end
    for p in pieces[1:]:
        assert p[:2] in (b"\xff\xc4", b"\xff\xda")  # DHT for the scan, or its SOS
    assert not pieces[-1].endswith(js.EOI)


def test_every_prefix_decodes_and_full_is_identical():
    src = encode(photo("coffee", (72, 56)))
    data = to_progressive(src).data
    pieces, _, _ = js.group_pieces(data)
    previous = None
    for k in range(1, js.SCAN_GROUPS + 1):
        img = decode(jpeg_of(pieces[:k]))
        assert img.shape == (56, 72, 3)
        if previous is not None and pieces[k - 1]:
            assert not np.array_equal(img, previous) or k == js.SCAN_GROUPS
        previous = img
    assert np.array_equal(decode(jpeg_of(pieces)), decode(src))


def test_exif_thumbnail_with_sos_bytes_does_not_confuse_the_parser():
    """An APP1 segment holding a whole JPEG (as EXIF thumbnails do) contains FFDA; a naive
    search would cut there.  The parser skips the segment by its length."""
    main = progressive(photo("rocket", (64, 48)))
    thumb = encode(photo("rocket", (16, 16)))
    assert b"\xff\xda" in thumb
    fake = main[:2] + app_segment(0xE1, b"Exif\x00\x00" + thumb) + main[2:]
    plain, with_app = js.parse(main), js.parse(fake)
    shift = len(fake) - len(main)
    assert [s.end + shift for s in plain.scans] == [s.end for s in with_app.scans]
    assert fake.find(b"\xff\xda") < with_app.scans[0].sos  # the naive answer is wrong
    assert np.array_equal(decode(jpeg_of(js.group_pieces(fake)[0])), decode(main))


def test_restart_markers_and_fill_bytes_stay_inside_scans():
    base = encode(photo("chelsea", (64, 48)))
    proc = subprocess.run(
        ["jpegtran", "-progressive", "-restart", "1B"], input=base, capture_output=True, check=True
    )
    data = proc.stdout
    layout = js.parse(data)
    rst_in_scans = sum(
        data[s.sos : s.end].count(bytes([0xFF, m])) for s in layout.scans for m in range(0xD0, 0xD8)
    )
    assert rst_in_scans > 0
    assert len(layout.scans) == 10 and layout.scans[-1].end == layout.eoi
    # fill bytes: extra FFs before a marker belong to no segment and must be tolerated
    cut = layout.scans[1].end
    padded = data[:cut] + b"\xff\xff\xff" + data[cut:]
    assert [s.signature for s in js.parse(padded).scans] == [s.signature for s in layout.scans]
    assert np.array_equal(decode(jpeg_of(js.group_pieces(padded)[0])), decode(data))


def test_stuffed_bytes_are_data():
    data = progressive(photo("immunohistochemistry", (96, 64)))
    layout = js.parse(data)
    stuffed = sum(data[s.sos : s.end].count(b"\xff\x00") for s in layout.scans)
    assert stuffed > 0  # a real photo has FF00 in its entropy data, and parsing still works
    assert len(layout.scans) == 10


@pytest.mark.parametrize(
    "damage, reason",
    [
        (lambda d: d[: len(d) // 2], "truncated"),
        (lambda d: b"GIF89a" + d, "not a JPEG"),
        (lambda d: d[:2] + b"\xff\xe0\xff\xff" + d[2:], "truncated"),
        (lambda d: d[:2] + b"\x12\x34" + d[2:], "corrupt"),
    ],
)
def test_damaged_input_raises_jpeg_error(damage, reason):
    data = progressive(photo("astronaut", (32, 32)))
    with pytest.raises(js.JpegError, match=reason):
        js.group_pieces(damage(data))


def test_unknown_script_uses_identity_map():
    base = encode(photo("coffee", (48, 48)))
    # a 2-scan script: all DC, then all AC of each component in one go
    script = b"0,1,2: 0-0, 0, 0;\n0: 1-63, 0, 0;\n1: 1-63, 0, 0;\n2: 1-63, 0, 0;\n"
    import os
    import tempfile

    with tempfile.NamedTemporaryFile("wb", suffix=".txt", delete=False) as f:
        f.write(script)
    try:
        data = subprocess.run(
            ["jpegtran", "-scans", f.name], input=base, capture_output=True, check=True
        ).stdout
    finally:
        os.unlink(f.name)
    pieces, smap, layout = js.group_pieces(data)
    assert smap.name == "identity" and len(layout.scans) == 4
    assert [bool(p) for p in pieces] == [True] * 4 + [False] * 6
    assert np.array_equal(decode(jpeg_of(pieces[:4])), decode(base))
