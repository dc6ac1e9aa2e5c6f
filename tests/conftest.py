import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.join(ROOT, "tests")
# Tests are grouped by what they need (tests/README.md); their module names stay unique, so
# each group directory is on the path and a module imports a sibling's helpers by name.
GROUPS = [os.path.join(TESTS, g) for g in ("unit", "jobs", "stores", "cluster")]
sys.path[:0] = [TESTS, *GROUPS]  # tests/support is the package `support`
sys.path.insert(1, os.path.join(ROOT, "launch", "setup.d"))  # set-up code the tests exercise
# Beam's local runner converts in SDK worker processes (its multi_processing mode): they must
# import the ops these tests define in their own modules, as a user's workers import theirs
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (ROOT, TESTS, *GROUPS, os.environ.get("PYTHONPATH")) if p
)

# Beam's local runner starts worker processes per job in its default (multi_processing)
# mode: seconds of fixed cost that hundreds of small test jobs would pay.  The suite runs
# the same graph in multi_threading mode; the tests of the default itself (golden digests,
# the drivers, Ctrl-C) clear this for their jobs (DEFAULT_MODE_ENV).
os.environ.setdefault("TAR2TF_DIRECT_RUNNING_MODE", "multi_threading")
DEFAULT_MODE_ENV = {"TAR2TF_DIRECT_RUNNING_MODE": ""}

# Every fixture module, registered once here (never imported into a test module, which
# would make one copy of each session fixture per module): a session server starts once.
pytest_plugins = [
    "support.cli_fixtures",
    "support.ais_fixtures",
    "support.gcs_fixtures",
    "support.s3_fixtures",
    "support.objstore_fixtures",
    "support.flink_fixtures",
    "support.flink_cluster_fixtures",
]

COMPAT = os.path.join(ROOT, "..", "shared", "testdata", "compat")

# In CI (CI=true) nothing may skip quietly: a test skipped because a server, tool or data
# set-up should have provided is missing fails instead.  Skips that are not about the
# environment (a parameter combination that does not apply) say so with this prefix.
NOT_APPLICABLE = "n/a: "


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("true", "1", "yes")


# A test is marked with the server it needs from the fixtures it uses, so `-m "not ais"` and
# the like select by need without a hand-kept list (pyproject.toml registers the markers).
SERVER_MARKS = {
    "ais_cluster": "ais",
    "gcs_emulator": "gcs",
    "moto_server": "s3",
    "flink": "flink",
    "flink_cluster_setup": "flink",
    "session_cluster": "flink",
}


@pytest.hookimpl(tryfirst=True)  # before -m selects by these markers
def pytest_collection_modifyitems(items):
    cluster = os.path.join(TESTS, "cluster") + os.sep
    for item in items:
        # tests/cluster holds the end-to-end runs (Flink JVMs, staging venvs, benchmarks,
        # golden digests on every runner, interrupts): all of it is the slow loop
        if str(item.path).startswith(cluster):
            item.add_marker("slow")
        names = set(item.fixturenames)
        params = getattr(getattr(item, "callspec", None), "params", {})
        if "backend" in params:  # objstore_fixtures.backend reaches its store lazily
            names.add({"ais": "ais_cluster", "gcs": "gcs_emulator"}[params["backend"]])
        for mark in sorted({SERVER_MARKS[n] for n in names & SERVER_MARKS.keys()}):
            item.add_marker(mark)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if not (in_ci() and report.skipped) or hasattr(report, "wasxfail"):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    if NOT_APPLICABLE in reason:
        return
    report.outcome = "failed"
    report.longrepr = f"skipped in CI (CI=true), which must not happen: {reason}"


# A thread a failed test left hanging (or a worker pool never shut down) would keep the
# interpreter from exiting after the summary, and turn a red run into a timed-out one: once
# pytest is done, a watchdog gives the exit this long, then names the threads still alive,
# prints their stacks and ends the process with the run's status (1 if the run passed).
EXIT_GRACE = 120.0


def pytest_sessionfinish(session, exitstatus):
    session.config._tar2tf_status = int(exitstatus)


def pytest_unconfigure(config):
    import faulthandler
    import threading

    status = getattr(config, "_tar2tf_status", 1)

    def watchdog():
        threading.Event().wait(EXIT_GRACE)
        stuck = [t.name for t in threading.enumerate() if not t.daemon and t.is_alive()]
        sys.stderr.write(f"tests/conftest.py: exit blocked {EXIT_GRACE:.0f} s by threads {stuck}\n")
        faulthandler.dump_traceback(all_threads=True)
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(status or 1)

    threading.Thread(target=watchdog, daemon=True, name="tar2tf-exit-watchdog").start()


@pytest.fixture(scope="session")
def compat_dir():
    if not os.path.isdir(COMPAT):
        pytest.skip(f"compat vectors not found at {COMPAT} (../shared/testdata/compat)")
    return COMPAT
