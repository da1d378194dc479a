"""How a configuration model is declared and checked: the shared model settings, the rules a
field constraint cannot state, and the one door from pydantic's errors to InvalidArgument."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from pydantic import ConfigDict, TypeAdapter, ValidationError
from pydantic.dataclasses import dataclass as pydantic_dataclass
from pydantic.fields import FieldInfo

from horizon_broker._config.messages import Location, refusal
from horizon_broker._core.errors import HorizonError

MODEL_CONFIG = ConfigDict(extra="forbid", frozen=True)
"""Every configuration model: an unknown key is an error, and a loaded value never changes."""
_SECTION_CONFIG = ConfigDict(extra="forbid")
"""The same for a :func:`section` (a dataclass says ``frozen`` itself)."""

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class RuleNote:
    """In a type's ``Annotated`` metadata: the rule its validator keeps, for the reference."""

    text: str


class Rule(ValueError):
    """A rule no field constraint can state (it spans keys, or a parser checks it), raised in a
    validator and reported like a constraint: ``key`` (empty: the section as a whole) and the
    rule it breaks."""

    def __init__(self, key: str, rule: str) -> None:
        super().__init__(f"{key}: {rule}" if key else rule)
        self.key = key
        self.rule = rule


@contextmanager
def refusing(key: str) -> Iterator[None]:
    """Inside a validator: a HorizonError of a shared checker (a server id, a granularity...)
    becomes a :class:`Rule` of ``key``, so it is reported with its file and section."""
    try:
        yield
    except HorizonError as error:
        raise Rule(key, str(error)) from None


class Section:
    """The base of a :func:`section` class: to the type checker, the dataclass it is (so
    ``dataclasses.replace`` of one type-checks)."""

    if TYPE_CHECKING:
        __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]


def section(cls: type[T]) -> type[T]:
    """``cls`` as a frozen pydantic dataclass that callers build, compare and
    ``dataclasses.replace`` like the plain dataclass it was; a bad value is an InvalidArgument."""
    made: Any = pydantic_dataclass(frozen=True, slots=True, config=_SECTION_CONFIG)(cls)
    init: Callable[..., None] = made.__init__

    @functools.wraps(init)
    def checked_init(self: Any, *args: Any, **kwargs: Any) -> None:
        try:
            init(self, *args, **kwargs)
        except ValidationError as error:
            raise refusal(error, made) from None

    made.__init__ = checked_init
    return made


_ADAPTERS: dict[Any, TypeAdapter[Any]] = {}
"""One adapter per model (building one costs a schema walk); a race builds one twice."""


def _adapter(kind: type[T]) -> TypeAdapter[T]:
    found = _ADAPTERS.get(kind)
    if found is None:
        found = _ADAPTERS.setdefault(kind, TypeAdapter(kind))
    return found


def validated(
    kind: type[T],
    data: Any,
    *,
    source: str | None = None,
    origins: Mapping[Location, str] | None = None,
) -> T:
    """``data`` (a file's TOML, with any overrides) checked as ``kind``; every problem reported
    at once in one InvalidArgument naming ``source`` (the file), the section, key and rule.
    ``origins`` names the environment variable a value came from instead of the file."""
    try:
        return _adapter(kind).validate_python(data)
    except ValidationError as error:
        raise refusal(error, kind, source=source, origins=origins or {}) from None


def json_schema(kind: type) -> dict[str, Any]:
    """The JSON Schema of a file whose shape is ``kind``, for editors."""
    return _adapter(kind).json_schema()


def fields_of(kind: Any) -> dict[str, FieldInfo]:
    """A model's (or pydantic dataclass's) fields, in declaration order."""
    return dict(getattr(kind, "__pydantic_fields__", {}))
