import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))

# session fixtures shared by several modules (registered once, so they run once)
pytest_plugins = ["ops_fixtures"]

COMPAT = os.path.join(ROOT, "..", "shared", "testdata", "compat")


@pytest.fixture(scope="session")
def compat_dir():
    if not os.path.isdir(COMPAT):
        pytest.skip(f"compat vectors not found at {COMPAT} (../shared/testdata/compat)")
    return COMPAT
