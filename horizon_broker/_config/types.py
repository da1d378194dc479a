"""Reading a configuration model's field types: what a file writes for a key, and whether a key
is a section (a nested model), an array of sections, or a value."""

from __future__ import annotations

import types
import typing
from typing import Any

from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined


def input_type(info: FieldInfo) -> Any:
    """The type a file gives for the field: a validator's declared input (a list of token
    entries that become grants), else the annotation."""
    for item in info.metadata:
        declared = getattr(item, "json_schema_input_type", Any)
        if declared is not Any and declared is not PydanticUndefined:
            return declared
    return info.annotation


def members(kind: Any) -> tuple[Any, ...]:
    """The alternatives of a union (``X | None``: X and None), each without its annotations."""
    kind = unannotated(kind)
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        return tuple(unannotated(member) for member in typing.get_args(kind))
    return (kind,)


def unannotated(kind: Any) -> Any:
    while typing.get_origin(kind) is typing.Annotated:
        kind = typing.get_args(kind)[0]
    return kind


def optional(kind: Any) -> bool:
    return type(None) in members(kind)


def without_none(kind: Any) -> Any:
    rest = [member for member in members(kind) if member is not type(None)]
    return rest[0] if len(rest) == 1 else kind


def is_model(kind: Any) -> bool:
    return isinstance(kind, type) and hasattr(kind, "__pydantic_fields__")


def element(kind: Any) -> Any | None:
    """The item type of a list or a ``tuple[X, ...]`` (None for anything else)."""
    kind = unannotated(kind)
    if typing.get_origin(kind) in (list, tuple):
        args = typing.get_args(kind)
        return args[0] if args else Any
    return None


def tagged(kind: Any) -> dict[str, Any]:
    """A discriminated union's members by tag (an array entry's loc names its tag)."""
    found = {}
    for member in typing.get_args(unannotated(kind)):
        for extra in getattr(member, "__metadata__", ()):
            tag = getattr(extra, "tag", None)
            if isinstance(tag, str):
                found[tag] = unannotated(member)
    return found
