"""numpy, imported when first used rather than when tar2tf's modules are.

A shard worker converting JPEGs with Pillow (decode -> resize -> encode) or passing
records through never needs numpy, whose import is a large part of such a worker's
start-up (docs/benchmarks.md, "Costs behind design choices").  ``np`` stands for the
module and imports it at the first attribute access (``np.asarray``, ``np.ndarray``...);
:func:`is_array` asks whether a value is an array without importing anything: while
numpy is not imported, no value can be one.
"""

from __future__ import annotations

import sys
from typing import Any, Optional


class _Numpy:
    """The numpy module, imported at the first attribute access."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        import numpy

        return getattr(numpy, name)


np: Any = _Numpy()


def loaded() -> Optional[Any]:
    """The numpy module if something imported it, else None."""
    return sys.modules.get("numpy")


def is_array(value: Any) -> bool:
    """``isinstance(value, numpy.ndarray)``, without importing numpy."""
    mod = sys.modules.get("numpy")
    return mod is not None and isinstance(value, mod.ndarray)
