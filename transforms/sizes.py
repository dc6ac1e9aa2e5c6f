"""Byte sizes given by people: ``100MB`` (decimal), ``1GiB`` (binary) or a plain number.

Parsing is delegated to ``humanfriendly``, which follows the IEC/SI convention: ``MB`` is
10**6 and ``MiB`` is 2**20, exactly as the original AIS client used it.
"""

from __future__ import annotations

import math
from typing import Optional, Union

#: what a size may look like, for the message of one that does not
FORMS = (
    "give a number of bytes, with a unit if you like: 5000000, 1e6, 500KB, 100MB, 1.5GB, "
    "2GiB (kB, MB, GB, TB are powers of 1000; KiB, MiB, GiB, TiB of 1024)"
)


def parse_size(value: Union[None, int, str]) -> Optional[int]:
    """Return a positive number of bytes, or None for None/empty."""
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise ValueError(f"invalid size {value!r}")
    if isinstance(value, int):
        n = value
    else:
        try:  # a plain number is bytes: humanfriendly truncates "1.5" to 1, silently
            plain = float(str(value).strip())
        except ValueError:
            plain = None
        if plain is not None and not (math.isfinite(plain) and plain == int(plain)):
            raise ValueError(f"invalid size {value!r}: not a whole number of bytes")
        if plain is not None:  # 5000000, 1e6: humanfriendly reads no exponent
            n = int(plain)
        else:
            import humanfriendly  # imported for a size with a unit: workers get numbers (~8 ms)

            try:
                n = humanfriendly.parse_size(str(value).strip(), binary=False)
            except humanfriendly.InvalidSize:
                # its own message quotes its tokenizer, which tells a user nothing
                raise ValueError(f"invalid size {value!r}: {FORMS}") from None
    if n <= 0:
        raise ValueError(f"size must be positive, got {value!r}")
    return int(n)
