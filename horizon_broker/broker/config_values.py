"""Turning one configuration section's raw values (TOML, or ``HORIZON_*`` environment strings)
into its typed dataclass: each value coerced to its field's type, unknown keys refused."""

from __future__ import annotations

import json
import types
import typing
from collections.abc import Mapping
from dataclasses import fields
from typing import Any, Literal

from horizon_broker._core.errors import InvalidArgument


def build_section(name: str, cls: type, raw: dict[str, Any], environ: Mapping[str, str]) -> Any:
    hints = typing.get_type_hints(cls)
    known = {f.name for f in fields(cls)}
    unknown = set(raw) - known
    if unknown:
        raise InvalidArgument(
            f"unknown key(s) in [{name}]: {', '.join(sorted(unknown))}; "
            f"known: {', '.join(sorted(known))}"
        )
    values: dict[str, Any] = {}
    for key in known:
        env_name = f"HORIZON_{name.upper()}_{key.upper()}"
        if env_name in environ:
            raw_value: Any = environ[env_name]
            if key == "conf":
                raw_value = json_env(env_name, raw_value)
            values[key] = convert(f"{env_name}", hints[key], raw_value, from_env=True)
        elif key in raw:
            values[key] = convert(f"[{name}].{key}", hints[key], raw[key], from_env=False)
    return cls(**values)


def convert(where: str, hint: Any, value: Any, *, from_env: bool) -> Any:
    """Coerce one value to its field type; environment values arrive as strings."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType) and type(None) in args:
        if value is None or (from_env and value == ""):
            return None
        inner = next(arg for arg in args if arg is not type(None))
        return convert(where, inner, value, from_env=from_env)
    if origin is Literal:
        if value not in args:
            raise InvalidArgument(f"{where} must be one of {', '.join(map(str, args))}: {value!r}")
        return value
    if origin is tuple:  # the Spark conf: a mapping of strings
        if not isinstance(value, Mapping):
            raise InvalidArgument(f"{where} must be a table of string settings")
        return tuple(sorted((str(k), str(v)) for k, v in value.items()))
    try:
        if hint is bool:
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.lower() in {"1", "true", "yes", "on"}:
                return True
            if isinstance(value, str) and value.lower() in {"0", "false", "no", "off"}:
                return False
            raise ValueError(value)
        if hint is int:
            if isinstance(value, bool):
                raise ValueError(value)
            return int(value)
        if hint is float:
            return float(value)
        if hint is str:
            if not isinstance(value, str):
                raise ValueError(value)
            return value
    except (TypeError, ValueError):
        raise InvalidArgument(f"{where} must be a {hint.__name__}, got {value!r}") from None
    raise InvalidArgument(f"{where}: unsupported setting type {hint!r}")


def json_env(name: str, text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise InvalidArgument(f"{name} must be JSON: {error}") from None
