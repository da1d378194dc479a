"""What went wrong in Spark, told by the engine's own error types, never by message text.

A query's SQL may put any text it likes into an error message (``raise_error('...')``), so a
decision the broker takes on a failure (the caller's fault or ours, a segment file to fall back
from, a vanished view, a dead engine) rests only on what the caller cannot write: Spark's error
*condition* (``DIVIDE_BY_ZERO``, ``FAILED_READ_FILE.FILE_NOT_EXIST``...), its SQLSTATE, its
structured message parameters, and the Java exception classes along the cause chain. The
caller's own words appear only inside a message, scrubbed of paths and hosts.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from horizon_broker._core.errors import (
    HorizonError,
    Internal,
    InvalidArgument,
    ResourceExhausted,
    Unavailable,
)
from horizon_broker.broker.spark.scan_layout import VIEW_PREFIX

log = logging.getLogger("horizon.broker.spark")

_MAX_CHAIN = 16

READ_CONDITIONS = ("FAILED_READ_FILE", "CANNOT_READ_FILE_FOOTER", "PATH_NOT_FOUND")
"""Conditions Spark's file readers raise for one file they were asked to read (``path``)."""

_CALLER_SQLSTATE_CLASSES = {
    "22": "a value the query computes is invalid",
    "42": "the query does not analyse",
    "P0": "the query raised an error",
    "21": "a subquery returned more rows than one",
    "0A": "the query uses a feature Spark does not support",
    "23": "a constraint was violated",
    "2B": "the query is invalid",
}
_LIMIT_SQLSTATE_CLASSES = ("54", "53")
_CALLER_JAVA_CLASSES = frozenset(
    {
        "java.util.regex.PatternSyntaxException",
        "java.lang.ArithmeticException",
        "java.lang.NumberFormatException",
        "java.lang.IllegalArgumentException",
        "java.lang.ArrayIndexOutOfBoundsException",
        "java.lang.NegativeArraySizeException",
        "java.lang.StringIndexOutOfBoundsException",
        "java.nio.charset.MalformedInputException",
        "org.apache.spark.sql.catalyst.parser.ParseException",
    }
)
_CALLER_JAVA_PREFIXES = ("java.time.",)
_PYTHON_CALLER_TYPES = frozenset(
    {
        "ParseException",
        "ArithmeticException",
        "NumberFormatException",
        "DateTimeException",
        "IllegalArgumentException",
        "ArrayIndexOutOfBoundsException",
    }
)
_ENGINE_GONE_TYPES = frozenset(
    {"Py4JNetworkError", "ConnectionRefusedError", "ConnectionResetError", "BrokenPipeError"}
)

_PATH = re.compile(r"(?:\b[a-zA-Z][\w+.-]*:/+|(?<![\w)\]])/)(?:[^\s/'\"`]+/)+[^\s'\"`]*")
_HOST = re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b")
_EXECUTOR = re.compile(r"\(\S+ executor \S+\)|\bexecutor \S+|\bTID \d+")


@dataclass(frozen=True, slots=True)
class FailureLink:
    """One exception of a failure's cause chain, as the engine typed it."""

    java_class: str
    """The JVM exception class (or the Python exception type for Spark Connect)."""
    condition: str | None = None
    """Spark's error condition (``DIVIDE_BY_ZERO``, ``FAILED_READ_FILE.FILE_NOT_EXIST``...)."""
    sql_state: str | None = None
    parameters: dict[str, str] = field(default_factory=dict)
    message: str = ""


class EngineLost(Unavailable):
    """The Spark engine stopped answering while the query ran (its JVM died, or the Connect
    server went away); the broker is restarting it."""


class OutOfMemory(ResourceExhausted):
    """A query ran the Spark JVM out of heap. Spark fails its tasks alone, but the error may
    also have struck one of Spark's own threads: the supervisor runs a job to check."""


class UnreadableFiles(Unavailable):
    """Spark's reader failed on segment files the broker listed (missing or corrupt); the broker
    checks them itself before it falls back."""

    def __init__(self, paths: Sequence[str], detail: str) -> None:
        super().__init__(f"unreadable segment file(s): {', '.join(paths) or '?'} ({detail})")
        self.paths = tuple(paths)
        self.detail = detail


class ViewMissing(Unavailable):
    """A segment view this broker built is gone from the Spark session."""

    def __init__(self, name: str) -> None:
        super().__init__(f"segment view {name} vanished from the Spark session")
        self.name = name


def failure_chain(error: BaseException) -> list[FailureLink]:
    """The cause chain of a Spark failure, outermost first: JVM throwables through Py4J for
    classic Spark, the typed exceptions (and their ``__cause__``) for Spark Connect."""
    throwable = getattr(error, "java_exception", None) or getattr(error, "_origin", None)
    links: list[FailureLink] = []
    if throwable is not None:
        seen = 0
        while throwable is not None and seen < _MAX_CHAIN:
            links.append(_java_link(throwable))
            try:
                throwable = throwable.getCause()
            except Exception:  # the JVM went away mid-walk
                break
            seen += 1
        return links
    current: BaseException | None = error
    while current is not None and len(links) < _MAX_CHAIN:
        links.append(_python_link(current))
        current = current.__cause__
    return links


def _java_link(throwable: Any) -> FailureLink:
    try:
        name = str(throwable.getClass().getName())
    except Exception:
        return FailureLink("?")
    condition = sql_state = None
    parameters: dict[str, str] = {}
    try:
        condition = throwable.getCondition()
        sql_state = throwable.getSqlState()
        parameters = {str(k): str(v) for k, v in dict(throwable.getMessageParameters()).items()}
    except Exception:  # not a SparkThrowable
        pass
    try:
        message = str(throwable.getMessage() or "")
    except Exception:
        message = ""
    return FailureLink(name, condition or None, sql_state or None, parameters, message)


def _python_link(error: BaseException) -> FailureLink:
    condition = sql_state = None
    parameters: dict[str, str] = {}
    for attribute, setter in (("getCondition", "c"), ("getSqlState", "s")):
        method = getattr(error, attribute, None)
        if callable(method):
            try:
                value = method()
            except Exception:
                value = None
            if setter == "c":
                condition = value
            else:
                sql_state = value
    method = getattr(error, "getMessageParameters", None)
    if callable(method):
        try:
            parameters = {str(k): str(v) for k, v in (method() or {}).items()}
        except Exception:
            parameters = {}
    name = type(error).__name__
    return FailureLink(name, condition or None, sql_state or None, parameters, str(error))


def classify(
    error: BaseException, files: Sequence[str] = (), views: Iterable[str] = ()
) -> HorizonError:
    """Horizon's error for a Spark failure of a query that read ``files`` through ``views``.

    In order: the engine is gone; the caller raised an error (``raise_error``,
    ``assert_true``: never anything else, whatever its text says); a reader failed on a listed
    segment file; one of the query's views vanished; the innermost typed cause decides
    (SQLSTATE class, then Java class); anything else is INTERNAL.
    """
    if isinstance(error, HorizonError):
        return error
    if type(error).__name__ in _ENGINE_GONE_TYPES or _py4j_without_answer(error):
        return EngineLost(f"the Spark engine stopped answering: {type(error).__name__}")
    chain = failure_chain(error)
    raised = next((link for link in chain if (link.sql_state or "").startswith("P0")), None)
    if raised is not None:
        return _caller_error(raised)
    read = _read_failure(chain, files)
    if read is not None:
        return read
    missing = _view_missing(chain, views)
    if missing is not None:
        return missing
    for link in reversed(chain):
        typed = _typed_cause(link)
        if typed is not None:
            return typed
    log.warning("Spark failed", exc_info=error)
    innermost = chain[-1] if chain else FailureLink(type(error).__name__)
    return Internal(f"Spark failed to run the query: {_describe(innermost)}")


def _view_missing(chain: list[FailureLink], views: Iterable[str]) -> ViewMissing | None:
    """One of the query's own views vanished (dropped under it), if the chain says so."""
    for link in chain:
        if link.condition == "TABLE_OR_VIEW_NOT_FOUND":
            name = link.parameters.get("relationName", "").strip("`")
            if name.startswith(VIEW_PREFIX) and name in set(views):
                return ViewMissing(name)
    return None


def _typed_cause(link: FailureLink) -> HorizonError | None:
    """Horizon's error for one cause by its SQLSTATE class, then its Java class; None when
    neither decides."""
    state = link.sql_state or ""
    if state[:2] in _CALLER_SQLSTATE_CLASSES:
        return _caller_error(link)
    if state[:2] in _LIMIT_SQLSTATE_CLASSES:
        refused = ResourceExhausted(f"Spark refused the query: {_describe(link)}")
        refused.condition = link.condition or ""
        return refused
    if link.java_class == "java.lang.OutOfMemoryError":
        return OutOfMemory(
            "the query ran Spark out of memory; it was stopped, other queries go on "
            "(select less, or aggregate first)"
        )
    if link.java_class in _CALLER_JAVA_CLASSES or link.java_class.startswith(_CALLER_JAVA_PREFIXES):
        return _caller_error(link)
    if link.condition is None and link.java_class in _PYTHON_CALLER_TYPES:
        return _caller_error(link)
    if link.condition == "SPARK_JOB_CANCELLED" or link.java_class.endswith("InterruptedException"):
        return Unavailable("Spark cancelled the query's jobs (the engine is stopping)")
    return None


def read_failure_paths(error: BaseException, files: Sequence[str]) -> UnreadableFiles | None:
    """The listed files a reader failed on, when ``error`` is a reader's failure of them (not
    a read of a file this broker did not list: that is no file of ours to mark)."""
    found = _read_failure(failure_chain(error), files)
    return found if isinstance(found, UnreadableFiles) else None


def _read_failure(chain: list[FailureLink], files: Sequence[str]) -> HorizonError | None:
    for link in chain:
        condition = link.condition or ""
        reader = condition.startswith(READ_CONDITIONS) or (
            link.java_class == "java.io.FileNotFoundException" and not condition
        )
        if not reader:
            continue
        named = link.parameters.get("path", "")
        paths = [path for path in files if named and same_file(named, path)]
        if paths:
            return UnreadableFiles(paths, f"{condition or link.java_class}")
        if named:
            return Unavailable(
                f"Spark could not read a file the query needs ({condition}); it is not one of "
                "the segment files this broker listed, so nothing was marked unreadable"
            )
    return None


def same_file(named: str, listed: str) -> bool:
    """Whether Spark's spelling of a path (``file:///a/b``, ``file:/a/b``) is ``listed``."""
    return normal_path(named) == normal_path(listed)


def normal_path(path: str) -> str:
    if path.startswith("file:"):
        path = "/" + path[len("file:") :].lstrip("/")
    return path.rstrip("/")


def _py4j_without_answer(error: BaseException) -> bool:
    """Py4J's own errors (not a JVM exception): the gateway or its connection is gone."""
    kind = type(error)
    return (
        kind.__module__.startswith("py4j")
        and kind.__name__ == "Py4JError"
        and getattr(error, "java_exception", None) is None
    )


def _caller_error(link: FailureLink) -> InvalidArgument:
    rejected = InvalidArgument(f"Spark rejected the query: {_describe(link)}")
    rejected.condition = link.condition or ""
    return rejected


def _describe(link: FailureLink) -> str:
    """``[CONDITION] message`` (or ``Class: message``), scrubbed of paths, hosts, executors
    and the query context Spark appends."""
    text = link.message
    for marker in (" SQLSTATE:", "\n== SQL", "\n\tat ", "\nJVM stacktrace"):
        cut = text.find(marker)
        if cut >= 0:
            text = text[:cut]
    text = " ".join(text.split())
    if link.condition and text.startswith(f"[{link.condition}]"):
        text = text[len(link.condition) + 2 :].strip()
    text = scrub(text)[:1000]
    label = f"[{link.condition}]" if link.condition else link.java_class.rsplit(".", 1)[-1] + ":"
    return f"{label} {text}".strip()


def scrub(text: str) -> str:
    """``text`` without file paths, host addresses and executor ids.

    >>> scrub("Lost task 0.0 (TID 5) (10.0.0.7 executor 1): file:/data/t/a.parquet is bad")
    'Lost task 0.0 (<task>) (<executor>): <path> is bad'
    """
    text = _EXECUTOR.sub(_executor_placeholder, text)
    text = _PATH.sub("<path>", text)
    return _HOST.sub("<host>", text)


def _executor_placeholder(match: re.Match[str]) -> str:
    found = match.group()
    if found.startswith("("):
        return "(<executor>)"
    return "<task>" if found.startswith("TID") else "<executor>"
