"""Credentials out of everything tar2tf writes or prints, and control characters out of
what it prints to a terminal.

:func:`redact` is the one rule for secrets: the userinfo of a URL
(``http://user:secret@host/`` -> ``http://***@host/``) and the values of query
parameters whose names say they hold a secret (``?token=``, ``sig=``,
``X-Amz-Signature=``, ``X-Goog-Credential=``, ``access_token=``, ``password=`` ...) become
``***``.  It is applied to reject reasons (``transforms.record_types.Reject``), manifests and
rejects files, ``job.json``, summary JSON, log records and the one-line error messages of
the CLI; the text stays readable (the host, the path and the other parameters are kept).

:func:`printable` is for terminals only: a tar member named ``\\x1b]0;title\\x07`` must
not retitle the user's terminal or recolour its output.  JSON files escape control
characters themselves and are left to ``json``.
"""

from __future__ import annotations

import logging
import re
import traceback
from typing import Any, Optional

MASK = "***"

# scheme://user[:password]@ -- the userinfo of any URL in the text.  The userinfo stops
# at the first character that cannot be in it, so "a@b" in plain prose is left alone
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<info>[^/?#@\s\"'<>]+)@")

# query (or fragment / form) parameters whose value is a secret, by name; matched as a
# whole parameter name, case-insensitively, after "?", "&", ";" or "#"
_SECRET_NAMES = (
    r"token|access_token|id_token|refresh_token|auth|authorization|auth_token|bearer|"
    r"sig|signature|x-amz-signature|x-amz-credential|x-amz-security-token|"
    r"x-goog-signature|x-goog-credential|x-goog-security-token|googleaccessid|"
    r"password|passwd|pwd|secret|client_secret|api_key|apikey|key|access_key|"
    r"secret_key|sessiontoken|session_token|credential|credentials|"
    r"security-token"
)
_SECRET_PARAM = re.compile(
    r"(?P<lead>[?&;#])(?P<name>" + _SECRET_NAMES + r")=(?P<value>[^&#\s\"'<>]*)", re.IGNORECASE
)
# "Authorization: Bearer xyz" / "token=xyz" said in an SDK's exception text
_HEADER = re.compile(
    r"(?P<name>\bauthorization:\s*(?:bearer|basic)?\s*)(?P<value>[^\s\"',;]+)", re.IGNORECASE
)
# Punctuation that ends a sentence or closes a bracket around a URL ("(see ...?token=x).")
# is prose, not the value: the run of it that ends a matched value is kept in the text.
# (Stripped from the match, not excluded by the pattern: a lookahead for it would make
# the match quadratic in a long run of such characters.)
_TRAILING = ")]},.;:!"


def _masked(m: "re.Match[str]", head: str) -> str:
    value = m.group("value")
    return head + MASK + value[len(value.rstrip(_TRAILING)) :]


def redact(text: str) -> str:
    """``text`` with URL userinfo and secret query values replaced by ``***``."""
    if not text or ("@" not in text and "=" not in text and ":" not in text):
        return text
    text = _USERINFO.sub(lambda m: m.group("scheme") + MASK + "@", text)
    text = _SECRET_PARAM.sub(lambda m: _masked(m, f"{m.group('lead')}{m.group('name')}="), text)
    return _HEADER.sub(lambda m: _masked(m, m.group("name")), text)


def redact_obj(obj: Any) -> Any:
    """:func:`redact` applied to every string (keys too) of a JSON-like value."""
    if isinstance(obj, str):
        return redact(obj)
    if isinstance(obj, dict):
        return {redact_obj(k) if isinstance(k, str) else k: redact_obj(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(redact_obj(v) for v in obj)
    return obj


# C0 controls except newline and tab, DEL, C1 controls, and the Unicode line/paragraph
# separators and bidirectional overrides that reorder what a terminal shows
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _escape(m: "re.Match[str]") -> str:
    c = ord(m.group(0))
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def printable(text: str) -> str:
    """``text`` for a terminal: control characters as ``\\xNN`` (``\\uNNNN``), newlines and
    tabs kept (a message may span lines on purpose); surrogate escapes of undecodable
    bytes as ``\\xNN`` too; secrets redacted (:func:`redact`)."""
    text = redact(text)
    if any(0xDC80 <= ord(c) <= 0xDCFF for c in text):
        text = "".join(
            f"\\x{ord(c) - 0xDC00:02x}" if 0xDC80 <= ord(c) <= 0xDCFF else c for c in text
        )
    return _CONTROL.sub(_escape, text)


def one_line(text: str) -> str:
    """:func:`printable`, newlines and tabs escaped as well: a value shown inside one line."""
    return printable(text).replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")


_factory_installed = False


def install_log_redaction() -> None:
    """Every log record this process makes from now on has its message and its traceback
    passed through :func:`printable` as it is made, before any handler (or logging's
    last-resort printer) sees it: the CLI's process (``launch.log_redact``) and every worker
    process that logs to the same terminal (``pipelines.inprocess.worker``).  Only records that
    pass their logger's level are made, so quiet loggers cost nothing.  Idempotent."""
    global _factory_installed
    if _factory_installed:
        return
    _factory_installed = True
    make = logging.getLogRecordFactory()

    def factory(*args, **kwargs):
        record = make(*args, **kwargs)
        try:
            record.msg, record.args = printable(record.getMessage()), None
        except Exception:
            return record
        if record.exc_info and record.exc_info[0] is not None and not record.exc_text:
            record.exc_text = printable(
                "".join(traceback.format_exception(*record.exc_info))
            ).rstrip("\n")
        return record

    logging.setLogRecordFactory(factory)


def log_settings() -> tuple:
    """``(level, format)`` of this process's root logger, for a worker process that logs
    to the same stream (:func:`log_like`); format None: no handler (logging's last resort
    prints the bare message of a WARNING or worse)."""
    root = logging.getLogger()
    fmt: Optional[str] = None
    for h in root.handlers:
        style = getattr(h.formatter, "_style", None)
        if type(style) is logging.PercentStyle:  # what basicConfig's format= takes
            fmt = style._fmt
            break
    return root.getEffectiveLevel(), fmt


def log_like(level: int, fmt: Optional[str]) -> None:
    """A worker process's logging as :func:`log_settings` of its parent gave it, to its
    stderr, redacted and escaped (:func:`install_log_redaction`)."""
    install_log_redaction()
    logging.basicConfig(level=level, format=fmt or "%(message)s")
