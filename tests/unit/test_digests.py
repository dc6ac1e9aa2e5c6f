"""CRC-32C combine: the CRC of a concatenation from the parts' CRCs."""

import google_crc32c
from hypothesis import example, given, settings
from hypothesis import strategies as st

from transforms.tfrecord.digests import crc32c_combine


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=3000), st.binary(max_size=3000))
@example(b"", b"")
@example(b"abc", b"")
@example(b"", b"abc")
def test_combine_equals_the_crc_of_the_concatenation(a, b):
    assert crc32c_combine(
        google_crc32c.value(a), google_crc32c.value(b), len(b)
    ) == google_crc32c.value(a + b)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.binary(max_size=500), max_size=8))
def test_combining_parts_in_order_gives_the_whole(parts):
    crc = 0
    for p in parts:
        crc = crc32c_combine(crc, google_crc32c.value(p), len(p))
    assert crc == google_crc32c.value(b"".join(parts))


def test_combine_over_long_lengths_matches_extending_with_zeros():
    # lengths far past any test buffer: x^(8n) mod P for many bits of n
    zeros = bytes(5_000_000)
    a = google_crc32c.value(b"head")
    assert crc32c_combine(a, google_crc32c.value(zeros), len(zeros)) == google_crc32c.value(
        b"head" + zeros
    )
