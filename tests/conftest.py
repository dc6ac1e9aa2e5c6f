import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
# Beam's local runner converts in SDK worker processes (its multi_processing mode): they must
# import the ops these tests define in their own modules, as a user's workers import theirs
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (ROOT, os.path.join(ROOT, "tests"), os.environ.get("PYTHONPATH")) if p)

# session fixtures shared by several modules (registered once, so they run once)
pytest_plugins = ["ops_fixtures"]

COMPAT = os.path.join(ROOT, "..", "shared", "testdata", "compat")


@pytest.fixture(scope="session")
def compat_dir():
    if not os.path.isdir(COMPAT):
        pytest.skip(f"compat vectors not found at {COMPAT} (../shared/testdata/compat)")
    return COMPAT
