"""The Flink job server's own log on the CLI's stderr.

Beam's Python FlinkRunner starts the job server (``java -jar ...``) and logs every line
the JVM prints, stdout and stderr alike, at INFO under the logger ``FlinkJarJobServer``,
which the CLI's WARNING level would drop: the server's log was only visible with ``-v``,
among all of Beam's own INFO lines.  :func:`show` makes that logger pass the server's
SLF4J records (``[thread] LEVEL logger - message``, as slf4j-simple writes them, with the
lines that follow them: stack traces, multi-line messages) under their Java level, so
what the server logs at its level (WARN unless set: launch/flink.sh, docs/runners.md)
reaches stderr.  Anything else the JVM prints (java.util.logging from vendored gRPC, which
the server's level does not govern) still needs ``-v``, as before.
"""

import logging
import re

LOGGER = "FlinkJarJobServer"  # apache_beam.runners.portability.job_server: the class name
# slf4j-simple's line: [thread] LEVEL logger - message (thread names may hold brackets)
_SLF4J = re.compile(r"^\[.*\] (TRACE|DEBUG|INFO|WARN|ERROR) \S+ - ")
# java.util.logging's first line: "Nov 25, 2026 6:37:43 AM class method" (or a 24-hour time)
_JUL = re.compile(r"^[A-Z][a-z]{2} \d{1,2}, \d{4} \d{1,2}:\d{2}:\d{2}( [AP]M)? \S")
# Records the server logs at WARN that say nothing to the user: shown only with -v, at INFO.
# Pekko's CoordinatedShutdown registers a JVM shutdown hook when its actor system starts;
# when Beam stops the job server at the end of a job while that start is still under way,
# the JVM refuses the hook ("Shutdown in progress"): a race of the server's own exit, seen
# after successful jobs on a loaded machine.
_NOT_FOR_USERS = re.compile(
    r"org\.apache\.pekko\.actor\.CoordinatedShutdown - Could not addJvmShutdownHook, "
    r"due to: Shutdown in progress"
)
_LEVELS = {
    "TRACE": logging.DEBUG,
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARN": logging.WARNING,
    "ERROR": logging.ERROR,
}


class JavaLogFilter(logging.Filter):
    """Passes the lines of SLF4J records, relabelled with the record's Java level; other
    output passes only when the root logger is at INFO or below (``tar2tf -v``)."""

    def __init__(self):
        super().__init__()
        self._level = (
            None  # the Java level of the record the next lines continue; None: not SLF4J's
        )

    def filter(self, record: logging.LogRecord) -> bool:
        line = record.getMessage()
        m = _SLF4J.match(line)
        if m:
            self._level = _LEVELS[m.group(1)]
            if self._level == logging.WARNING and _NOT_FOR_USERS.search(line):
                # gated as JVM output that is not the server's log: relabelling it INFO
                # would not hide it, since the server's INFO records pass (FLINK_LOG_LEVEL)
                self._level = None
        elif line.startswith("SLF4J: "):  # SLF4J's own diagnostics (no or several bindings)
            self._level = logging.WARNING
        elif _JUL.match(line):
            self._level = None
        if self._level is None:
            return logging.getLogger().isEnabledFor(logging.INFO)
        record.levelno, record.levelname = self._level, logging.getLevelName(self._level)
        return True


def show() -> None:
    """Attach the filter to the job server's logger (once) and let its INFO records through."""
    log = logging.getLogger(LOGGER)
    if not any(isinstance(f, JavaLogFilter) for f in log.filters):
        log.addFilter(JavaLogFilter())
    log.setLevel(logging.INFO)
