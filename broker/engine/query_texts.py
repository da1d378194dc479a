"""Repeated query texts: parsed once, and bound once per state of the tables they read.

Dashboards send the same text again and again, and between two of them the state of the tables
they read has usually not changed. Parsing and binding are pure functions of the text, the limits
and the catalog (no clocks, no I/O), so their results are kept: the parse per text, the rewrite
per (text, row cap, work budget, catalog entries). Catalog entries are themselves kept objects,
one per table state (:class:`~broker.engine.catalog.CatalogEntries`), so "the same entries" is
tested by identity; the kept rewrite holds its entries, so an identity cannot be reused while the
rewrite is kept.

Only successes are kept: a text that fails to parse or bind fails again the same way, cheaply
enough, and keeping errors would keep their tracebacks.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from typing import Generic, TypeVar

from broker.sql import ParsedQuery
from broker.sql.catalog import CatalogTable
from broker.sql.model import RewriteResult, WorkBudget

TEXTS_KEPT = 512
"""Parsed texts and bound rewrites kept (each a few kilobytes of tree or text)."""

MAX_KEPT_TEXT = 16_384
"""Longer texts are parsed and bound every time: they are rarely repeated and their trees are
large."""

_V = TypeVar("_V")


class _Kept(Generic[_V]):
    """A small thread-safe LRU."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._items: OrderedDict[Hashable, _V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> _V | None:
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
            return found

    def put(self, key: Hashable, value: _V) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)


class QueryTexts:
    """Kept parses and rewrites of recent query texts (one per engine: its limits and function
    policy are fixed, so the text alone decides the parse)."""

    def __init__(self, capacity: int = TEXTS_KEPT) -> None:
        self._parsed: _Kept[ParsedQuery] = _Kept(capacity)
        self._bound: _Kept[tuple[tuple[CatalogTable, ...], RewriteResult]] = _Kept(capacity)
        self.parses = 0
        """Texts parsed (a probe: a repeated text leaves it flat)."""
        self.binds = 0
        """Rewrites bound (a probe: a repeated text on an unchanged state leaves it flat)."""

    def parse(self, sql: str, parse: Callable[[str], ParsedQuery]) -> ParsedQuery:
        """``parse(sql)``, or the kept result of it."""
        if len(sql) > MAX_KEPT_TEXT:
            self.parses += 1
            return parse(sql)
        found = self._parsed.get(sql)
        if found is None:
            found = parse(sql)
            self.parses += 1
            self._parsed.put(sql, found)
        return found

    def bind(
        self,
        parsed: ParsedQuery,
        entries: Sequence[CatalogTable] | None,
        budget: WorkBudget,
        row_cap: int | None,
        bind: Callable[[], RewriteResult],
    ) -> RewriteResult:
        """``bind()``, or the kept rewrite of ``parsed`` against the same catalog ``entries``
        (None: entries built for this query alone, which nothing can match)."""
        if entries is None or len(parsed.sql) > MAX_KEPT_TEXT:
            self.binds += 1
            return bind()
        held = tuple(entries)
        key = (parsed.sql, row_cap, budget, tuple(id(entry) for entry in held))
        found = self._bound.get(key)
        if found is not None and all(a is b for a, b in zip(found[0], held, strict=True)):
            return found[1]
        result = bind()
        self.binds += 1
        self._bound.put(key, (held, result))
        return result
