"""A configuration model's keys as Markdown: one table per section with each key's type,
default, rule and meaning, all read from the model (so the reference cannot drift from it)."""

from __future__ import annotations

import enum
import inspect
import json
import typing
from typing import Any

import annotated_types
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from horizon_broker._config import types
from horizon_broker._config.schema import RuleNote, fields_of

_NAMES = {str: "string", int: "integer", float: "number", bool: "boolean", dict: "table"}
_BOUNDS = (
    (annotated_types.Ge, "ge", ">= {}"),
    (annotated_types.Gt, "gt", "> {}"),
    (annotated_types.Le, "le", "<= {}"),
    (annotated_types.Lt, "lt", "< {}"),
)


def section_markdown(title: str, kind: Any, *, skip: tuple[str, ...] = ()) -> list[str]:
    """``## title``, the section's docstring, and a table of its keys (``skip``: subsections
    listed on their own)."""
    lines = [f"## {title}", ""]
    doc = inspect.cleandoc(kind.__doc__ or "")
    if doc:
        lines += [doc, ""]
    lines += ["| key | type | default | rule | meaning |", "| --- | --- | --- | --- | --- |"]
    for name, info in fields_of(kind).items():
        if name not in skip:
            cells = (
                f"`{name}`",
                type_text(types.input_type(info)),
                default_text(info),
                rule_text(info),
                _cell(info.description or ""),
            )
            lines.append("| " + " | ".join(cells) + " |")
    return [*lines, ""]


def type_text(kind: Any) -> str:
    """How a file writes a value of ``kind``: ``integer``, ``"keep" or "fail"``, ``list of
    strings``, ``string (optional)``..."""
    if types.optional(kind):
        return f"{type_text(types.without_none(kind))} (optional)"
    alternatives = types.members(kind)
    if len(alternatives) > 1:
        return " or ".join(type_text(member) for member in alternatives)
    kind = alternatives[0]
    if typing.get_origin(kind) is typing.Literal:
        return " or ".join(f'`"{value}"`' for value in typing.get_args(kind))
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return " or ".join(f'`"{member.value}"`' for member in kind)
    item = types.element(kind)
    if item is not None:
        return f"list of {_plural(type_text(item))}"
    if typing.get_origin(kind) is dict:
        return f"table of {_plural(type_text(typing.get_args(kind)[1]))}"
    if types.is_model(kind):
        return "table (below)"
    return _NAMES.get(kind, getattr(kind, "__name__", str(kind)))


def default_text(info: FieldInfo) -> str:
    if info.is_required():
        return "required"
    value = info.get_default(call_default_factory=True)
    if value is None or value is PydanticUndefined:
        return "unset"
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, str):
        return f'`"{value}"`'
    if isinstance(value, tuple | list | dict):
        return f"`{json.dumps(value)}`" if value else "none"
    if types.is_model(type(value)):
        return "(below)"
    return f"`{value!r}`"


def rule_text(info: FieldInfo) -> str:
    """The field's constraints, and any rule its validators keep (``json_schema_extra`` "rule")."""
    rules = [
        text.format(getattr(item, attribute))
        for item in info.metadata
        for cls, attribute, text in _BOUNDS
        if isinstance(item, cls)
    ]
    rules += ["not empty" for item in info.metadata if isinstance(item, annotated_types.MinLen)]
    rules += [f"matches `{item.pattern}`" for item in info.metadata if hasattr(item, "pattern")]
    notes = [*info.metadata, *_nested_metadata(info.annotation)]
    rules += [item.text for item in notes if isinstance(item, RuleNote)]
    extra = info.json_schema_extra
    if isinstance(extra, dict) and extra.get("rule"):
        rules.append(str(extra["rule"]))
    return _cell("; ".join(rules)) or "—"


def _nested_metadata(kind: Any) -> list[Any]:
    """The ``Annotated`` metadata of a union's members (``Duration | None``)."""
    return [
        item for member in typing.get_args(kind) for item in getattr(member, "__metadata__", ())
    ]


def _plural(text: str) -> str:
    return text if " " in text or text.endswith("s") else f"{text}s"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")
