"""Log lines a log system can index: one JSON object per line (``format = "json"``) or readable
text, and never a secret.

Code anywhere logs as usual; fields a log system should index go in ``extra`` (``event``,
``query_id``, ``table``...), which the JSON format writes as keys of the line and the text format
appends as ``key=value``. Every line passes a redactor before it is written: the configured
tokens' secrets, and any ``Bearer``/``Basic`` credential, become ``[redacted]`` whatever logged
them (an error message quoting a header, a query text holding a token).

Fields carry callers' text (a client-chosen query id, an error quoting a literal), so no field
can start a line or fake another field: JSON escapes every string; the text format writes a
message or value as a JSON string unless it is plainly safe (no control character, quote,
backslash, ``=`` or space), and indents an exception's lines under the record they belong to.
Libraries' own chatter (py4j's line per closed connection, urllib3, asyncio, gRPC) is kept to
``library_level`` (WARNING) unless configured otherwise.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from collections.abc import Iterable
from typing import Any, Literal, TextIO

LogFormat = Literal["text", "json"]
REDACTED = "[redacted]"
MIN_SECRET_CHARS = 4
"""Shorter secrets are not searched for (they would blank out ordinary words); tokens that
short are no secret anyway."""

_CREDENTIAL = re.compile(r"(?i)\b(bearer|basic)(\s+)[A-Za-z0-9._~+/=-]+")
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}
_BARE_VALUE = re.compile(r"[A-Za-z0-9_.:/@+,\-]+")
"""A text-format value written as it is; anything else is written as a JSON string."""
_PLAIN_MESSAGE = re.compile(r"[^\x00-\x1f\x7f-\x9f\u2028\u2029=\"\\]*")
"""A text-format message written as it is (spaces allowed: it is the line's free text)."""
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")
CONTINUATION = "  | "
"""Prefix of an exception's lines in the text format: no record line starts with it."""
LIBRARY_LOGGERS = ("py4j", "urllib3", "asyncio", "grpc", "pyspark")
"""Third-party loggers held to ``library_level``: py4j alone writes an INFO line each time a
thread's connection to the JVM closes (every Spark probe, every 2 s)."""


class Redactor:
    """Replaces secrets in text: the given ones (as written and as JSON escapes them) and any
    bearer or basic credential."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        forms = set()
        for secret in secrets:
            if len(secret) >= MIN_SECRET_CHARS:
                forms.add(secret)
                forms.add(json.dumps(secret)[1:-1])
        self._secrets = sorted(forms, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return _CREDENTIAL.sub(rf"\1\2{REDACTED}", text)


def record_fields(record: logging.LogRecord) -> dict[str, Any]:
    """What the caller passed in ``extra`` (everything that is not a standard record field)."""
    return {
        key: value
        for key, value in vars(record).items()
        if key not in _STANDARD and not key.startswith("_")
    }


def _timestamp(record: logging.LogRecord) -> str:
    seconds = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
    return f"{seconds}.{int(record.msecs):03d}Z"


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``ts``, ``level``, ``logger``, ``message``, the extra fields,
    and ``exception`` with the stack trace when there is one."""

    def __init__(self, redact: Redactor | None = None) -> None:
        super().__init__()
        self.redact = redact or Redactor()

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": _timestamp(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in record_fields(record).items():
            line[f"extra.{key}" if key in line else key] = value  # never replaces ts, level...
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return self.redact(json.dumps(line, default=str, separators=(",", ":")))


class TextFormatter(logging.Formatter):
    """``time level logger: message key=value ...`` for people reading a terminal; an
    exception follows on lines of its own, each starting with :data:`CONTINUATION`."""

    def __init__(self, redact: Redactor | None = None) -> None:
        super().__init__()
        self.redact = redact or Redactor()

    def format(self, record: logging.LogRecord) -> str:
        message = _text_message(record.getMessage())
        text = f"{self.formatTime(record)} {record.levelname} {record.name}: {message}"
        for key, value in record_fields(record).items():
            text += f" {_text_value(key)}={_text_value(value)}"
        details = []
        if record.exc_info:
            details.append(self.formatException(record.exc_info))
        if record.stack_info:
            details.append(self.formatStack(record.stack_info))
        for detail in details:
            for line in detail.splitlines():
                text += f"\n{CONTINUATION}{_CONTROL.sub(_escaped, line)}"
        return self.redact(text)


def _text_message(message: str) -> str:
    """The message as it is, or as a JSON string when it holds what could end the line or
    fake a field (a control character, ``=``, a quote, a backslash)."""
    return message if _PLAIN_MESSAGE.fullmatch(message) else json.dumps(message)


def _text_value(value: Any) -> str:
    if isinstance(value, str) and _BARE_VALUE.fullmatch(value):
        return value
    return json.dumps(value, default=str, separators=(",", ":"))


def _escaped(match: re.Match[str]) -> str:
    return json.dumps(match.group())[1:-1]


class _HorizonHandler(logging.StreamHandler):
    """The handler :func:`configure_logging` installs (and replaces when called again)."""


def configure_logging(
    format: LogFormat = "text",
    level: str | int = "INFO",
    *,
    secrets: Iterable[str] = (),
    stream: TextIO | None = None,
    library_level: str | int = "WARNING",
) -> logging.Handler:
    """Send every log line of the process to ``stream`` (stderr) in ``format``, redacting
    ``secrets``, with :data:`LIBRARY_LOGGERS` at ``library_level``; replaces the handler an
    earlier call installed, leaves others alone."""
    redact = Redactor(secrets)
    handler = _HorizonHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter(redact) if format == "json" else TextFormatter(redact))
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _HorizonHandler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level if isinstance(level, int) else level.upper())
    for name in LIBRARY_LOGGERS:
        logging.getLogger(name).setLevel(
            library_level if isinstance(library_level, int) else library_level.upper()
        )
    return handler
