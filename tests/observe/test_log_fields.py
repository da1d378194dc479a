"""Log fields carry callers' text (a client-chosen query id, an error quoting a literal): in
either format, no value can start a new line or pose as another field, and libraries' chatter
stays out unless configured. Real process logging into a captured stream; no Spark."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from horizon_broker._core.logs import CONTINUATION, LIBRARY_LOGGERS, configure_logging

FORGED = 'q1\n2026-11-29 00:00:00,000 ERROR horizon.query: forged level=ERROR status="OK" \\'
"""A query id that, written as it is, would add a line and fake fields."""
SPACELESS = 'q2\nlevel=ERROR\rstatus="OK"'
"""The same without a space (the text format once wrote such a value as it is)."""

log = logging.getLogger("horizon.test.fields")


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    captured = io.StringIO()
    yield captured
    for handler in list(logging.getLogger().handlers):
        if getattr(handler, "stream", None) is captured:
            logging.getLogger().removeHandler(handler)


def logfmt_pairs(line: str) -> dict[str, str]:
    """The ``key=value`` pairs after the message, read as a logfmt parser would: the message
    is a JSON string or plain words, a value a JSON string, list or object, else bare up to the
    next space."""
    decoder = json.JSONDecoder()
    _, _, rest = line.partition(": ")
    if rest.startswith('"'):
        _, end = decoder.raw_decode(rest)
        rest = rest[end:]
    else:
        equals = rest.find("=")
        rest = "" if equals < 0 else rest[rest.rfind(" ", 0, equals) :]
    pairs: dict[str, object] = {}
    rest = rest.strip()
    while rest:
        key, _, rest = rest.partition("=")
        if rest.startswith(('"', "[", "{")):
            value, end = decoder.raw_decode(rest)
            pairs[key] = value
            rest = rest[end:].strip()
        else:
            pairs[key], _, rest = rest.partition(" ")
    return pairs


def test_text_values_with_newlines_and_quotes_cannot_forge_a_line_or_a_field(stream):
    configure_logging("text", "INFO", stream=stream)
    fields = {"query_id": FORGED, "label": SPACELESS, "rows": 0}
    log.warning("query %s ended %s", FORGED, "INTERNAL", extra=fields)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1
    (line,) = lines
    assert " WARNING horizon.test.fields: " in line
    pairs = logfmt_pairs(line)
    assert pairs == {
        "query_id": FORGED,
        "label": SPACELESS,
        "rows": "0",
    }  # no level=, no status= of the caller's


def test_a_message_with_a_field_lookalike_is_quoted_in_the_text_format(stream):
    configure_logging("text", "INFO", stream=stream)
    log.info("table a level=ERROR b", extra={"table": "accounts"})
    log.info("plain words stay readable", extra={"identity": "reader"})
    quoted, plain = stream.getvalue().splitlines()
    assert quoted.endswith(': "table a level=ERROR b" table=accounts')
    assert plain.endswith(": plain words stay readable identity=reader")


def test_an_exception_quoting_a_caller_stays_under_its_record(stream):
    configure_logging("text", "INFO", stream=stream)
    try:
        raise ValueError(f"bad literal {FORGED}\r\x1b[2K")
    except ValueError:
        log.exception("query failed")
    first, *rest = stream.getvalue().splitlines()
    assert first.endswith("ERROR horizon.test.fields: query failed")
    assert rest and all(line.startswith(CONTINUATION) for line in rest)
    assert "\x1b" not in stream.getvalue()  # a terminal escape is written escaped


@settings(max_examples=200, deadline=None)
@given(value=st.text())
def test_any_value_is_one_line_in_both_formats_and_reads_back_as_written(value):
    assume(not re.search(r"(?i)\b(bearer|basic)\s", value))  # the redactor's, not the caller's
    for format in ("text", "json"):
        captured = io.StringIO()
        handler = configure_logging(format, "INFO", stream=captured)  # type: ignore[arg-type]
        try:
            log.info("query %s ended", value, extra={"query_id": value, "identity": "admin"})
        finally:
            logging.getLogger().removeHandler(handler)
        written = captured.getvalue()
        (line,) = written.splitlines()  # no line break of any kind inside
        if format == "json":
            fields = json.loads(line)
            assert fields["query_id"] == value and fields["level"] == "INFO"
            assert fields["message"] == f"query {value} ended"
        else:
            assert logfmt_pairs(line) == {"query_id": value, "identity": "admin"}


def test_json_extra_fields_never_replace_the_records_own(stream):
    configure_logging("json", "INFO", stream=stream)
    log.info("hello", extra={"level": "ERROR", "ts": "forged"})
    line = json.loads(stream.getvalue())
    assert line["level"] == "INFO" and line["ts"] != "forged"
    assert line["extra.level"] == "ERROR"


def test_library_chatter_is_quiet_unless_configured(stream):
    configure_logging("text", "INFO", stream=stream)
    logging.getLogger("py4j.clientserver").info("Closing down clientserver connection")
    logging.getLogger("py4j.clientserver").warning("a py4j warning still shows")
    assert "Closing down" not in stream.getvalue()
    assert "a py4j warning still shows" in stream.getvalue()
    configure_logging("text", "INFO", stream=stream, library_level="INFO")
    logging.getLogger("py4j.clientserver").info("Closing down clientserver connection")
    assert "Closing down" in stream.getvalue()
    assert "py4j" in LIBRARY_LOGGERS
    configure_logging("text", "INFO", stream=stream)  # leave the process as it was
