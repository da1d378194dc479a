"""Log lines a log system can index: one JSON object per line (``format = "json"``) or readable
text, and never a secret.

Code anywhere logs as usual; fields a log system should index go in ``extra`` (``event``,
``query_id``, ``table``...), which the JSON format writes as keys of the line and the text format
appends as ``key=value``. Every line passes a redactor before it is written: the configured
tokens' secrets, and any ``Bearer``/``Basic`` credential, become ``[redacted]`` whatever logged
them (an error message quoting a header, a query text holding a token).
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
        line.update(record_fields(record))
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return self.redact(json.dumps(line, default=str, separators=(",", ":")))


class TextFormatter(logging.Formatter):
    """``time level logger: message key=value ...`` for people reading a terminal."""

    def __init__(self, redact: Redactor | None = None) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")
        self.redact = redact or Redactor()

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        extra = record_fields(record)
        if extra:
            pairs = " ".join(f"{key}={_text_value(value)}" for key, value in extra.items())
            first, newline, rest = text.partition("\n")
            text = f"{first} {pairs}{newline}{rest}"
        return self.redact(text)


def _text_value(value: Any) -> str:
    if isinstance(value, str) and value and " " not in value:
        return value
    return json.dumps(value, default=str, separators=(",", ":"))


class _HorizonHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler :func:`configure_logging` installs (and replaces when called again)."""


def configure_logging(
    format: LogFormat = "text",
    level: str | int = "INFO",
    *,
    secrets: Iterable[str] = (),
    stream: TextIO | None = None,
) -> logging.Handler:
    """Send every log line of the process to ``stream`` (stderr) in ``format``, redacting
    ``secrets``; replaces the handler an earlier call installed, leaves others alone."""
    redact = Redactor(secrets)
    handler = _HorizonHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter(redact) if format == "json" else TextFormatter(redact))
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _HorizonHandler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level if isinstance(level, int) else level.upper())
    return handler
