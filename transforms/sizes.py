"""Byte sizes given by people: ``100MB`` (decimal), ``1GiB`` (binary) or a plain number.

Parsing is delegated to ``humanfriendly``, which follows the IEC/SI convention: ``MB`` is
10**6 and ``MiB`` is 2**20, exactly as the original AIS client used it.
"""

from __future__ import annotations

import math
from typing import Optional, Union


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
        import humanfriendly  # imported when a size string is parsed: workers get numbers (~8 ms)

        try:
            n = humanfriendly.parse_size(str(value).strip(), binary=False)
        except humanfriendly.InvalidSize as e:
            raise ValueError(f"invalid size {value!r}: {e}") from None
    if n <= 0:
        raise ValueError(f"size must be positive, got {value!r}")
    return int(n)
