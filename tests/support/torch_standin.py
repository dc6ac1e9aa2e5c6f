"""A stand-in for the few parts of ``torch`` that docs/pytorch.md's code uses, for running
that code where torch is not installed (it is large): ``torch.tensor``, and
``torch.utils.data``'s ``IterableDataset``, ``get_worker_info`` and a ``DataLoader`` that
runs its workers one after the other, each seeing its own ``get_worker_info()``, and
yields lists of up to ``batch_size`` items (no collation).  What it shows is how a
dataset splits its records among workers, not torch's own behaviour."""

from __future__ import annotations

import os

_INIT = """
import numpy as _np

from torch import utils  # noqa: F401


def tensor(data):
    return _np.array(data)
"""

_UTILS = "from torch.utils import data  # noqa: F401\n"

_DATA = """
import types

_worker = None


class IterableDataset:
    pass


def get_worker_info():
    return _worker


class DataLoader:
    def __init__(self, dataset, batch_size=1, num_workers=0):
        self.dataset, self.batch_size, self.num_workers = dataset, batch_size, num_workers

    def _batches(self):
        batch = []
        for item in self.dataset:
            if self.batch_size is None:
                yield item
                continue
            batch.append(item)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch:
            yield batch

    def __iter__(self):
        global _worker
        if not self.num_workers:
            yield from self._batches()
            return
        for i in range(self.num_workers):
            _worker = types.SimpleNamespace(id=i, num_workers=self.num_workers)
            try:
                yield from self._batches()
            finally:
                _worker = None
"""


def write_torch_standin(directory: str) -> str:
    """The stand-in package ``torch`` under ``directory`` (put it on ``PYTHONPATH``)."""
    pkg = os.path.join(directory, "torch")
    os.makedirs(os.path.join(pkg, "utils"), exist_ok=True)
    for rel, text in (
        ("__init__.py", _INIT),
        ("utils/__init__.py", _UTILS),
        ("utils/data.py", _DATA),
    ):
        with open(os.path.join(pkg, rel), "w") as f:
            f.write(text)
    return directory
