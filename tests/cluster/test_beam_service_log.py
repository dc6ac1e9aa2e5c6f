"""A successful run on a portable runner prints no Beam service chatter: ``Really starting
service``, ``Waiting for grpc channel to be ready``, ``Really destroying service`` are
dropped unless ``-v``; Beam's other warnings stay.  On the real embedded Flink, a
successful demo job prints no WARNING line at all (docs/runners.md)."""

from __future__ import annotations

import logging

import pytest
from support.cli_fixtures import DEMO_ARGS, DEMO_SOURCES
from support.flink_fixtures import flink_sh
from support.scripts import run_python

EMIT = """
import logging, sys
from launch import beam_service_log
logging.basicConfig(level=logging.INFO if "-v" in sys.argv else logging.WARNING,
                    format="%(levelname)s %(name)s: %(message)s")
beam_service_log.quiet()
svc = logging.getLogger("apache_beam.utils.subprocess_server")
svc.warning("Really starting service at %s with cmd: %s", "localhost:1", ("java", "-jar"))
logging.log(logging.WARNING, "Waiting for grpc channel to be ready at %s.", "localhost:1")
svc.warning("Error bringing up service (attempt %d of %d): %s", 1, 3, "refused")
svc.warning("Really destroying service at %s with cmd: %s", "localhost:1", ("java",))
"""


def _emit(*args):
    p = run_python(EMIT, *args, timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stderr.splitlines()


def test_chatter_dropped_real_warnings_kept():
    assert _emit() == [
        "WARNING apache_beam.utils.subprocess_server: Error bringing up service "
        "(attempt 1 of 3): refused"
    ]
    assert len(_emit("-v")) == 4


def test_the_cli_installs_it():
    from launch import beam_service_log, cli

    assert cli.main(["verify", "/nonexistent/x.manifest.json"]) == 2
    assert beam_service_log._FILTER in logging.getLogger(beam_service_log.SERVICE_LOGGER).filters
    assert beam_service_log._FILTER in logging.getLogger().filters


@pytest.mark.flink
@pytest.mark.slow
def test_successful_flink_run_prints_no_warning(flink, tmp_path):
    p = flink_sh(
        DEMO_SOURCES,
        "--output",
        str(tmp_path / "out" / "demo-{}.record"),
        *DEMO_ARGS,
        "--no-progress",
        "--parallelism=2",
        **flink,
    )
    assert p.returncode == 0, p.stderr[-5000:]
    warnings = [ln for ln in p.stderr.splitlines() if "WARNING" in ln or "WARN " in ln]
    assert warnings == [], "\n".join(warnings)[-5000:]
