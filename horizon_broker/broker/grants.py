"""The grant model: which tables an identity may read and whether it may inspect (pure).

Configuration names identities (``[[tokens]]``, :class:`TokenGrant`); authentication
(:mod:`horizon_broker.broker.api.auth`) turns a call into a :class:`Principal`; every layer that touches a
table asks the principal here. A caller without every grant must never learn whether a table it
may not read exists: :func:`not_readable` is the one answer for both.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from horizon_broker._core.errors import InvalidArgument, NotFound, PermissionDenied

ALL_TABLES = "*"


@dataclass(frozen=True, slots=True)
class TokenGrant:
    """An identity and what it may do: read ``tables`` (``*`` = all), inspect timelines.

    A caller proves it is ``name`` with the bearer ``token``, or (mutual TLS) with a client
    certificate whose common name is ``client_cn``."""

    name: str
    token: str = field(default="", repr=False)
    tables: frozenset[str] = frozenset({ALL_TABLES})
    inspect: bool = False
    client_cn: str = ""
    max_concurrent: int | None = None
    """This identity's queries running at once (None: only the broker's fair share)."""
    queries_per_second: float | None = None
    """This identity's admissions a second, a token bucket (None: no rate limit)."""

    def may_read(self, table: str) -> bool:
        return ALL_TABLES in self.tables or table.lower() in self.tables


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling and what they may do."""

    name: str
    tables: frozenset[str]
    inspect: bool

    def may_read(self, table: str) -> bool:
        return ALL_TABLES in self.tables or table.lower() in self.tables

    @property
    def restricted(self) -> bool:
        """Whether some tables are not granted (such a caller must not learn which exist)."""
        return ALL_TABLES not in self.tables


ANONYMOUS = Principal("anonymous", frozenset({ALL_TABLES}), inspect=True)


def check_read(principal: Principal, tables: Iterable[str]) -> None:
    """Fail with PERMISSION_DENIED unless ``principal`` may read every table in ``tables``."""
    denied = sorted({table for table in tables if not principal.may_read(table)})
    if denied:
        raise not_readable(principal, denied)


def not_readable(principal: Principal, tables: Iterable[str]) -> PermissionDenied:
    """The one answer a caller gets for a table it may not read, whether or not the table
    exists: a caller without the grant learns nothing about ungranted tables."""
    return PermissionDenied(
        f"token {principal.name!r} may not read table(s): {', '.join(tables)} "
        "(not granted, or not registered)"
    )


def resolve_readable(principal: Principal, registered: Iterable[str], name: str) -> str:
    """The registered spelling of ``name`` if ``principal`` may read it. An unknown name is
    NOT_FOUND only for a caller that may read every table; for any other caller it answers
    exactly like an ungranted one."""
    if not name:
        raise InvalidArgument("a table name is required")
    found = next((table for table in registered if table.lower() == name.lower()), None)
    if found is not None and principal.may_read(found):
        return found
    if found is None and not principal.restricted:
        raise NotFound(f"table {name!r} is not registered")
    raise not_readable(principal, [name])


def check_inspect(principal: Principal, table: str | None = None) -> None:
    """Fail with PERMISSION_DENIED unless ``principal`` may inspect (``table``'s) state."""
    if not principal.inspect:
        raise PermissionDenied(f"token {principal.name!r} may not inspect timelines and watermarks")
    if table is not None:
        check_read(principal, [table])
