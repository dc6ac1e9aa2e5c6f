"""launch/job_server_log.py: the Flink job server's SLF4J records reach the CLI's stderr at
their Java level, with their stack traces; other JVM output only with -v."""

import logging

import pytest
from support.scripts import run_python

from launch import job_server_log

# what the JVM printed during one embedded Flink job (slf4j-simple at WARN; a JUL record
# from vendored gRPC), line by line as Beam's runner logs it
LINES = [
    "[main] WARN org.apache.beam.runners.jobsubmission.JobServerDriver - Exception during job server creation",
    "java.io.IOException: Failed to bind to address 0.0.0.0/0.0.0.0:45613",
    "\tat org.apache.beam.sdk.fn.server.GrpcFnServer.create(GrpcFnServer.java:110)",
    "Nov 25, 2026 6:37:43 AM org.apache.beam.vendor.grpc.v1p60p1.io.grpc.internal.SerializingExecutor run",
    "SEVERE: Exception while executing runnable",
    "java.lang.IllegalStateException: call already closed",
    "[CHAIN MapPartition (MapPartition at [2]{SpreadShards, ConvertShard}) (1/2)#0] ERROR "
    "org.apache.beam.runners.jobsubmission.JobInvocation - Error during job invocation x.",
    "Caused by: java.net.ConnectException: Connection refused",
    "",
    "[main] INFO org.apache.beam.runners.jobsubmission.JobServerDriver - JobService started on localhost:1",
    "SLF4J: Class path contains multiple SLF4J bindings.",
]


class _Keep(logging.Handler):
    def __init__(self):
        super().__init__()
        self.got = []

    def emit(self, record):
        self.got.append((record.levelname, record.getMessage()))


@pytest.fixture
def logged():
    """Feed LINES through a logger that has the filter, under a root at `root_level`."""
    root = logging.getLogger()
    saved = root.level

    def feed(root_level):
        root.setLevel(root_level)
        log = logging.getLogger(f"test_job_server_log.{root_level}")
        log.propagate = False
        keep = _Keep()
        log.addHandler(keep)
        log.addFilter(job_server_log.JavaLogFilter())
        log.setLevel(logging.INFO)
        for line in LINES:
            log.info(line)  # as apache_beam.utils.subprocess_server's reader does
        return keep.got

    yield feed
    root.setLevel(saved)


def test_slf4j_records_pass_at_their_java_level_jul_output_does_not(logged):
    W, E, I = "WARNING", "ERROR", "INFO"
    assert logged(logging.WARNING) == [
        (W, LINES[0]),
        (W, LINES[1]),
        (W, LINES[2]),
        (E, LINES[6]),
        (E, LINES[7]),
        (E, LINES[8]),
        (I, LINES[9]),
        (W, LINES[10]),
    ]


def test_the_servers_own_shutdown_race_is_not_a_warning():
    """Pekko's refused shutdown hook, logged at WARN while Beam stops the server after a
    successful job, is shown only with -v (at INFO); another WARN of the same logger stays
    a warning."""
    log = logging.getLogger("test_job_server_log.shutdown")
    log.propagate = False
    keep = _Keep()
    log.addHandler(keep)
    log.addFilter(job_server_log.JavaLogFilter())
    log.setLevel(logging.INFO)
    race = (
        "[flink-pekko.actor.default-dispatcher-6] WARN org.apache.pekko.actor.CoordinatedShutdown"
        " - Could not addJvmShutdownHook, due to: Shutdown in progress"
    )
    other = race.replace("Could not addJvmShutdownHook", "Task timed out")
    root = logging.getLogger()
    saved = root.level
    try:
        for root_level in (logging.WARNING, logging.INFO):
            root.setLevel(root_level)
            keep.got.clear()
            log.info(race)
            log.info(other)
            shown = [("INFO", race)] if root_level == logging.INFO else []
            assert keep.got == [*shown, ("WARNING", other)]
    finally:
        root.setLevel(saved)


def test_with_verbose_logging_everything_passes(logged):
    got = logged(logging.INFO)
    assert [m for _, m in got] == LINES
    assert [lvl for lvl, _ in got[3:6]] == ["INFO"] * 3  # JUL lines keep Beam's INFO


def test_the_cli_installs_the_filter_on_beams_job_server_logger():
    """`tar2tf` (launch/cli.py) attaches the filter to the logger Beam's FlinkRunner uses
    for the job server's output, whatever the subcommand."""
    code = (
        "import logging, sys\n"
        "from launch import cli, job_server_log\n"
        "cli.main(['verify', '/nonexistent/x.manifest.json'])\n"
        "from apache_beam.runners.portability.flink_runner import FlinkJarJobServer\n"
        "log = logging.getLogger(FlinkJarJobServer.__name__)\n"
        "print(log.level, [type(f).__name__ for f in log.filters])\n"
    )
    p = run_python(code, timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split("\n")[-2] == f"{logging.INFO} ['JavaLogFilter']"
