"""The one form of a configuration error: ``file: [section] key: rule (got value)``.

Every problem pydantic found is named where it is, in the file's own terms (``[limits]``,
``[[tokens]] #2``, a top-level key), or by the environment variable that set it; an unknown key
gets its closest known spelling; the problems of one file are joined into one message."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from horizon_broker._config import types
from horizon_broker._core.errors import InvalidArgument

Location = tuple[str | int, ...]

_RULES: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "greater_than_equal": lambda ctx: f"must be >= {ctx['ge']}",
    "greater_than": lambda ctx: f"must be > {ctx['gt']}",
    "less_than_equal": lambda ctx: f"must be <= {ctx['le']}",
    "less_than": lambda ctx: f"must be < {ctx['lt']}",
    "literal_error": lambda ctx: f"must be {ctx['expected']}",
    "enum": lambda ctx: f"must be {ctx['expected']}",
    "string_pattern_mismatch": lambda ctx: f"must match {ctx['pattern']}",
    "string_too_short": lambda ctx: "must not be empty",
    "too_short": lambda ctx: f"must have at least {ctx['min_length']} item(s)",
}
_KINDS = {
    "must be an integer": ("int_parsing", "int_type", "int_from_float"),
    "must be a number": ("float_parsing", "float_type"),
    "must be true or false": ("bool_parsing", "bool_type"),
    "must be a string": ("string_type",),
    "must be a table": ("dict_type", "model_type", "dataclass_type", "model_attributes_type"),
    "must be a list": ("list_type", "tuple_type"),
}


def _says(text: str) -> Callable[[Mapping[str, Any]], str]:
    """A rule whose message needs nothing of the error's context."""
    return lambda _ctx: text


_RULES.update({kind: _says(text) for text, kinds in _KINDS.items() for kind in kinds})
_UNKNOWN = ("unexpected_keyword_argument", "extra_forbidden")


@dataclass
class Place:
    """Where a problem is: the section's label, the key within it, and that section's keys."""

    section: str = ""
    key: list[str] = field(default_factory=list)
    known: Sequence[str] = ()
    renamed: Mapping[str, str] = field(default_factory=dict)

    def text(self) -> str:
        return " ".join(part for part in (self.section, ".".join(self.key)) if part)


def refusal(
    error: ValidationError,
    root: Any,
    *,
    source: str | None = None,
    origins: Mapping[Location, str] | None = None,
) -> InvalidArgument:
    """One InvalidArgument for every problem in ``error`` (a model of type ``root``): the file's
    problems after its name, then those of environment variables, each after the variable's."""
    in_file: list[str] = []
    in_environment: list[str] = []
    for item in error.errors(include_url=False):
        loc = tuple(item["loc"])
        place = locate(loc, root)
        rule = rule_of(item, place)
        origin = next((name for at, name in (origins or {}).items() if loc[: len(at)] == at), None)
        if origin:
            in_environment.append(f"{origin} ({place.text()}): {rule}")
        else:
            in_file.append(f"{place.text()}: {rule}" if place.text() else rule)
    found = list(dict.fromkeys(in_file))
    if found and source:
        found[0] = f"{source}: {found[0]}"
    return InvalidArgument("; ".join([*found, *dict.fromkeys(in_environment)]))


def rule_of(item: Mapping[str, Any], place: Place) -> str:
    kind, ctx = item["type"], item.get("ctx") or {}
    if kind in _UNKNOWN:
        return "unknown key" + _hint(place)
    if kind == "missing":
        return f"is missing (no {place.key[-1] if place.key else 'value'} given)"
    if kind in ("value_error", "assertion_error") and "error" in ctx:
        broken = ctx["error"]
        key = getattr(broken, "key", "")
        if key:
            place.key.append(key)
        return str(getattr(broken, "rule", broken))
    make = _RULES.get(kind)
    rule = make(ctx) if make else str(item["msg"])
    value = item.get("input")
    shown = not isinstance(value, dict | list) and kind != "missing"
    return f"{rule} (got {value!r})" if shown else rule


def _hint(place: Place) -> str:
    name = place.key[-1] if place.key else ""
    if name in place.renamed:
        return f": it is now {place.renamed[name]!r}"
    close = difflib.get_close_matches(name, place.known, n=1)
    if close:
        return f": did you mean {close[0]!r}?"
    return f" (known: {', '.join(place.known)})" if place.known else ""


def locate(loc: Location, root: Any) -> Place:
    """Follow ``loc`` through the model types: sections become ``[name]`` (``[[name]] #n`` for
    an entry of an array), the rest the key."""
    place, kind, dotted = Place(), root, ""
    parts = list(loc)
    while parts:
        part = parts.pop(0)
        fields = _fields(kind)
        if place.key or part not in fields:
            if isinstance(part, str) and part in types.tagged(kind):
                kind = types.tagged(kind)[part]
                continue
            if not place.key and fields:
                place.known = list(fields)
                place.renamed = getattr(kind, "RENAMED", {})
            place.key.append(f"[{part}]" if isinstance(part, int) else str(part))
            kind = None
            continue
        target = types.without_none(types.input_type(fields[str(part)]))
        dotted = f"{dotted}.{part}" if dotted else str(part)
        item = types.element(target)
        if types.is_model(target):
            place.section, kind = f"[{dotted}]", target
        elif item is not None and parts and isinstance(parts[0], int) and _sections(item):
            place.section = f"[[{dotted}]] #{int(parts.pop(0)) + 1}"
            kind = item if types.is_model(item) else types.unannotated(item)
        else:
            place.key.append(str(part))
            kind = target
    return place


def _fields(kind: Any) -> dict[str, Any]:
    return dict(getattr(kind, "__pydantic_fields__", {})) if types.is_model(kind) else {}


def _sections(item: Any) -> bool:
    return types.is_model(item) or bool(types.tagged(item))
