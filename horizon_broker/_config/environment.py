"""Environment overrides in one form: ``<PREFIX>_<SECTION>_<KEY>`` sets ``[section] key``.

A value is the text the file would hold, converted like the file's (``8``, ``2.5``, ``true`` /
``yes`` / ``on`` / ``1``); an empty value unsets an optional key; a structured key (a table or
array) takes JSON. The overrides win over the file."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic.fields import FieldInfo

from horizon_broker._config import types
from horizon_broker._config.messages import Location
from horizon_broker._config.schema import fields_of
from horizon_broker._core.errors import InvalidArgument


def environment_overrides(
    environ: Mapping[str, str], prefix: str, sections: Mapping[str, Any]
) -> tuple[dict[str, dict[str, Any]], dict[Location, str]]:
    """The overrides ``environ`` sets for ``sections`` (name to model), and where each came
    from (its variable's name, for the error that names it)."""
    data: dict[str, dict[str, Any]] = {}
    origins: dict[Location, str] = {}
    for name, kind in sections.items():
        for key, info in fields_of(kind).items():
            variable = f"{prefix}_{name.upper()}_{key.upper()}"
            if variable in environ:
                data.setdefault(name, {})[key] = environment_value(
                    variable, environ[variable], info
                )
                origins[(name, key)] = variable
    return data, origins


def environment_value(variable: str, text: str, info: FieldInfo) -> Any:
    """One variable's value for the field ``info``: JSON for a structured key, None for an
    empty optional one, else the text (the model converts it)."""
    kind = types.input_type(info)
    if _structured(types.without_none(kind)):
        return json_value(variable, text)
    if text == "" and types.optional(kind):
        return None
    return text


def json_value(variable: str, text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise InvalidArgument(f"{variable}: must be JSON ({error})") from None


def merged(data: Mapping[str, Any], overrides: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """``data`` with each section's overridden keys replaced (a section not a table is left for
    the model to refuse)."""
    result = dict(data)
    for name, values in overrides.items():
        section = result.get(name, {})
        result[name] = {**section, **values} if isinstance(section, Mapping) else section
    return result


def _structured(kind: Any) -> bool:
    origin = getattr(types.unannotated(kind), "__origin__", None)
    return origin in (dict, list, tuple) or types.unannotated(kind) in (dict, list)
