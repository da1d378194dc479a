"""Repeated query texts: parsed once, and bound once per state of the tables they read.

Dashboards send the same text again and again, and between two of them the state of the tables
they read has usually not changed. Parsing and binding are pure functions of the text, the limits
and the catalog (no clocks, no I/O), so their results are kept: the parse per text, the rewrite
per (text, row cap, work budget, catalog entries). Catalog entries are themselves kept objects,
one per table state (:class:`~horizon_broker.broker.engine.catalog.CatalogEntries`), so "the same entries" is
tested by identity; the kept rewrite holds its entries, so an identity cannot be reused while the
rewrite is kept. Both are bounded by their (estimated) memory, least recently used dropped first.

Only successes are kept: a text that fails to parse or bind fails again the same way, cheaply
enough, and keeping errors would keep their tracebacks.
"""

from __future__ import annotations

import functools
from collections.abc import Hashable

from horizon_broker._core.errors import InvalidArgument
from horizon_broker._core.lru import Lru
from horizon_broker.broker.sql import ParsedQuery, bind, parse_query
from horizon_broker.broker.sql.catalog import Catalog, CatalogTable
from horizon_broker.broker.sql.functions import FunctionPolicy
from horizon_broker.broker.sql.model import RewriteLimits, RewriteResult, WorkBudget

KEPT_BYTES = 32 * 1024 * 1024
"""Memory for kept parses, and as much for kept rewrites (estimated, see the sizes below)."""

TREE_BYTES_PER_CHAR = 100
"""A parsed tree's memory per character of its text (measured 60 to 80 with sqlglot 30)."""

MAX_KEPT_TEXT = 16_384
"""Longer texts are parsed and bound every time: they are rarely repeated and their trees are
large."""


def _parse_bytes(parsed: ParsedQuery) -> int:
    return TREE_BYTES_PER_CHAR * len(parsed.sql)


def _rewrite_bytes(kept: tuple[tuple[CatalogTable, ...], RewriteResult]) -> int:
    """The rewrite's texts, plus its entries' file and segment lists (kept alive with it)."""
    entries, result = kept
    listed = sum(len(entry.files) + len(entry.segments) for entry in entries)
    return len(result.sql) + len(result.capped_sql) + 200 * listed


class QueryTexts:
    """Kept parses and rewrites of recent query texts, under one engine's limits and function
    policy (fixed, so the text alone decides the parse)."""

    def __init__(
        self, limits: RewriteLimits, functions: FunctionPolicy, kept_bytes: int = KEPT_BYTES
    ) -> None:
        self._parse = functools.partial(parse_query, limits=limits, functions=functions)
        self._parsed: Lru[str, ParsedQuery] = Lru(kept_bytes, _parse_bytes)
        self._bound: Lru[Hashable, tuple[tuple[CatalogTable, ...], RewriteResult]] = Lru(
            kept_bytes, _rewrite_bytes
        )
        self.parses = 0
        """Texts parsed (a probe: a repeated text leaves it flat)."""
        self.binds = 0
        """Rewrites bound (a probe: a repeated text on an unchanged state leaves it flat)."""

    def parse(self, sql: str) -> ParsedQuery:
        """The checked parse of ``sql`` (:func:`~horizon_broker.broker.sql.parse_query`), kept or made."""
        if not isinstance(sql, str) or not sql.strip():
            raise InvalidArgument("the query is empty: send one SELECT statement")
        if len(sql) > MAX_KEPT_TEXT:
            self.parses += 1
            return self._parse(sql)
        found = self._parsed.get(sql)
        if found is None:
            found = self._parse(sql)
            self.parses += 1
            self._parsed.keep(sql, found)
        return found

    def bind(
        self,
        parsed: ParsedQuery,
        catalog: Catalog,
        *,
        budget: WorkBudget,
        row_cap: int | None,
        keep: bool = True,
    ) -> RewriteResult:
        """:func:`~horizon_broker.broker.sql.bind`, or the kept rewrite of ``parsed`` against the same catalog
        entries. ``keep`` False: the catalog holds entries built for this query alone (tables
        whose state could not be read), which nothing could match."""
        if not keep or len(parsed.sql) > MAX_KEPT_TEXT:
            self.binds += 1
            return bind(parsed, catalog, budget=budget, row_cap=row_cap)
        entries = tuple(catalog)
        key = (parsed.sql, row_cap, budget, tuple(id(entry) for entry in entries))
        found = self._bound.get(key)
        if found is not None and all(a is b for a, b in zip(found[0], entries, strict=True)):
            return found[1]
        result = bind(parsed, catalog, budget=budget, row_cap=row_cap)
        self.binds += 1
        self._bound.keep(key, (entries, result))
        return result
