"""Beam's service start-up chatter, out of a normal run's stderr.

Every run on a portable runner (``launch/flink.sh``'s embedded Flink, a job server Beam
starts for the run) makes Beam log, at WARNING, lines that report nothing wrong:
``Really starting service at localhost:N with cmd: (...)`` and ``Really destroying service
...`` (``apache_beam.utils.subprocess_server``), and ``Waiting for grpc channel to be
ready at localhost:N.`` once a second while the JVM starts (the root logger; many on a
busy machine).  They are dropped unless ``-v`` asks for INFO; a service that fails to come
up is still said, by Beam's other warnings and errors and by tar2tf's one line."""

from __future__ import annotations

import logging

SERVICE_LOGGER = "apache_beam.utils.subprocess_server"
_CHATTER = (
    "Really starting service at ",
    "Really destroying service at ",
    "Waiting for grpc channel to be ready at ",
)


class _Chatter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.msg if isinstance(record.msg, str) else ""
        if not msg.startswith(_CHATTER):
            return True
        return logging.getLogger().isEnabledFor(logging.INFO)


_FILTER = _Chatter()


def quiet() -> None:
    """Install the filter on the two loggers the lines come from (idempotent)."""
    for lg in (logging.getLogger(SERVICE_LOGGER), logging.getLogger()):
        if _FILTER not in lg.filters:
            lg.addFilter(_FILTER)
