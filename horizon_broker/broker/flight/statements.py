"""Prepared statements: a handle names a statement's SQL and its bound parameters.

The SQL is checked when the statement is created (rewrite and grants, as a query is), but it runs
only when executed, at the snapshot of that moment, like any query. Statements unused for the TTL
are closed; a handle works only for the caller that created it.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pyarrow as pa

from horizon_broker._core.errors import InvalidArgument, NotFound, PermissionDenied
from horizon_broker.broker.flight.parameters import bind
from horizon_broker.broker.flight.quotas import OwnerCounts, Quota, statement_quota


@dataclass
class PreparedStatement:
    handle: bytes
    owner: str
    sql: str
    placeholders: int
    dataset_schema: pa.Schema | None
    parameters: tuple[pa.Scalar, ...] | None = None
    touched: float = 0.0

    def bound_sql(self) -> str:
        """The SQL to run: the statement with its bound values as literals."""
        if self.placeholders == 0:
            return self.sql
        if self.parameters is None:
            raise InvalidArgument(
                f"the prepared statement has {self.placeholders} parameter marker(s) (?) and no "
                "values were bound: bind them before executing"
            )
        return bind(self.sql, self.parameters)


class StatementStore:
    def __init__(
        self,
        ttl_s: float,
        clock: Callable[[], float] = time.monotonic,
        quota: Quota | None = None,
    ) -> None:
        """``quota``: open statements on the broker and per identity (each is small; the bound
        keeps a leaking client in check, and one client from locking the others out)."""
        self.ttl_s = ttl_s
        self._clock = clock
        self._statements: dict[bytes, PreparedStatement] = {}
        self._owners = OwnerCounts(quota or statement_quota())
        self._lock = threading.Lock()

    def create(
        self, owner: str, sql: str, placeholders: int, dataset_schema: pa.Schema | None
    ) -> PreparedStatement:
        statement = PreparedStatement(
            handle=secrets.token_bytes(16),
            owner=owner,
            sql=sql,
            placeholders=placeholders,
            dataset_schema=dataset_schema,
            touched=self._clock(),
        )
        with self._lock:
            self._owners.add(owner)
            self._statements[statement.handle] = statement
        return statement

    def get(self, handle: bytes, owner: str) -> PreparedStatement:
        with self._lock:
            statement = self._statements.get(handle)
            if statement is None:
                raise NotFound(
                    "unknown prepared statement: it was closed, or unused for "
                    f"{self.ttl_s:g} s ([flight].statement_ttl_s); prepare it again"
                )
            if statement.owner != owner:
                raise PermissionDenied("this prepared statement belongs to another caller")
            statement.touched = self._clock()
            return statement

    def bind(self, handle: bytes, owner: str, values: Sequence[pa.Scalar]) -> PreparedStatement:
        statement = self.get(handle, owner)
        if len(values) != statement.placeholders:
            raise InvalidArgument(
                f"the prepared statement has {statement.placeholders} parameter marker(s) (?) "
                f"but {len(values)} value(s) were bound"
            )
        bind(statement.sql, values)  # every value must have a literal: refuse it now
        statement.parameters = tuple(values)
        return statement

    def close(self, handle: bytes, owner: str) -> None:
        self.get(handle, owner)
        with self._lock:
            if self._statements.pop(handle, None) is not None:
                self._owners.remove(owner)

    def check_room(self, owner: str) -> None:
        """Refuse now what :meth:`create` would refuse (before the statement is checked)."""
        with self._lock:
            self._owners.check(owner)

    def expire(self) -> int:
        limit = self._clock() - self.ttl_s
        with self._lock:
            idle = [h for h, s in self._statements.items() if s.touched < limit]
            for handle in idle:
                self._owners.remove(self._statements.pop(handle).owner)
        return len(idle)

    def __len__(self) -> int:
        return len(self._statements)
