"""Setuptools shim: Dataflow stages the job with ``--setup_file ./setup.py``.

All metadata lives in ``pyproject.toml``; the Beam stager runs ``python setup.py sdist``
on this file and workers ``pip install`` the result, which brings ``pipelines``,
``transforms`` and ``launch`` and their dependencies onto every worker.
"""

import setuptools

setuptools.setup()
