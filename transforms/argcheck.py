"""Checks of the Python API's arguments, made when an object is built
(``ConvertConfig``, ``Dataset``, the ops), with the CLI's rules (``launch/args.py``): a
value of the wrong type is a ``TypeError``, one out of range a ``ValueError``, each naming
the argument.  Left unchecked, such a value failed late and far from its cause: a size of
0 rejected every record, ``records_per_shard="3"`` was a ``TypeError`` from a comparison
inside the job, ``2.5`` was taken."""

from __future__ import annotations

import numbers
from typing import Any, Optional

from transforms.sizes import parse_size


def count(
    name: str, value: Any, lo: int, hi: Optional[int] = None, optional: bool = True
) -> Optional[int]:
    """``value`` as an integer in ``lo..hi`` (``hi`` None: no upper bound); None stays
    None where the option is ``optional`` (it then means the default)."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, not {value!r}")
    n = int(value)
    if n < lo or (hi is not None and n > hi):
        within = f"{lo}..{hi}" if hi is not None else f">= {lo}"
        raise ValueError(f"{name} must be {within}, got {n}")
    return n


def size(name: str, value: Any) -> Optional[int]:
    """``value`` as a positive byte count (``500MB``, ``2GiB``, a number), or None for None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, str)):
        raise TypeError(
            f"{name} must be a byte size (a number, or text such as '500MB'), not {value!r}"
        )
    try:
        # a float is taken as the CLI takes "1e6": bytes, if it is a whole number
        return parse_size(int(value) if isinstance(value, numbers.Integral) else str(value))
    except ValueError as e:
        raise ValueError(f"{name}: {e}") from None


def callable_or_none(name: str, value: Any) -> Any:
    if value is not None and not callable(value):
        raise TypeError(f"{name} must be callable, not {value!r}")
    return value


def text(name: str, value: Any, what: str) -> str:
    """``value``, a str (``what`` says what it names), or a ``TypeError``."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be {what} (str), not {value!r}")
    return value
