"""A pytest plugin for the set-up (launch/bootstrap.sh --for-tests): after collection and
-m/-k selection it writes the markers of the selected tests, one per line, to the file
named by $TAR2TF_NEEDS_OUT.  The server markers come from the fixtures a test uses
(conftest.py), so the set-up builds a server exactly when a selected test needs it."""

from __future__ import annotations

import os


def pytest_collection_finish(session):
    out = os.environ.get("TAR2TF_NEEDS_OUT")
    if not out:
        return
    names = sorted({m.name for item in session.items for m in item.iter_markers()})
    with open(out, "w") as f:
        f.writelines(n + "\n" for n in names)
