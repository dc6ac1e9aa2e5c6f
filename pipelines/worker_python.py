"""The command line of a Python worker process that does not import from its current
directory.

``python -c CODE`` and ``python -m MODULE`` put the current directory first on
``sys.path``: a ``yaml.py``, ``braceexpand.py`` or ``transforms/`` package in the directory
a user runs tar2tf from would be imported by the worker in place of the real one (and run).
Every worker tar2tf starts (the in-process driver's pool, Beam's local SDK workers, the
shared Flink worker pool) is started through :func:`python_c`:

* ``-P`` (Python 3.11+) leaves the current directory off ``sys.path``;
* on Python 3.10, which has no ``-P``, the code starts by dropping the ``''`` entry
  (the current directory) from ``sys.path`` before it imports anything: only the
  built-in ``sys`` is imported before that, and site-packages were set up earlier by the
  interpreter from its own directories.

Not ``-I``: it would also drop ``$PYTHONPATH`` and the user site directory, which users
rely on to make their own op modules importable in the workers.  A worker gets its
launcher's ``sys.path`` as its ``$PYTHONPATH`` (:func:`launcher_path`): it imports what the
launcher imports (a script's or notebook's own op modules, which cloudpickle ships by
reference), and nothing more.
"""

from __future__ import annotations

import os
import sys
from typing import List

# dropped on every version: "" is the current directory, whatever it is when imports happen
PRELUDE = "import sys; sys.path[:] = [p for p in sys.path if p]; "


def safe_path_flags() -> List[str]:
    """``["-P"]`` where the interpreter has it (3.11+), else none (:data:`PRELUDE` does it)."""
    return ["-P"] if sys.version_info >= (3, 11) else []


def python_c(code: str, python: str = sys.executable) -> List[str]:
    """``python -P -c PRELUDE+code`` (argv) for a worker process."""
    return [python, *safe_path_flags(), "-c", PRELUDE + code]


def launcher_path() -> str:
    """This process's ``sys.path`` as a ``$PYTHONPATH`` value for its workers (the ``""``
    entry, the current directory of an interactive session, left out)."""
    return os.pathsep.join(p for p in sys.path if p)
