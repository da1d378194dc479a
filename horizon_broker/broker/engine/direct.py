"""Plain key lookups answered straight from the segment files, when the broker may read them.

Only with embedded Spark: its files are this machine's files (on a cluster or behind Spark
Connect a local path may name a file the broker cannot see). The rewrite found the lookup
(:mod:`horizon_broker.broker.sql.passes.find_key_lookup`); :mod:`horizon_broker.broker.direct_lookup.direct_read` reads it. The result
schema of each lookup shape is Spark's own, from the first lookup of that shape; later lookups of
the shape are answered without any call into Spark. The files ingestion adds to a table looked up
lately are read before they become visible (:mod:`horizon_broker.broker.direct_lookup.file_warming`).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import pyarrow as pa

from horizon_broker._core.lru import Lru
from horizon_broker.broker.config import SparkConfig
from horizon_broker.broker.direct_lookup.direct_read import DirectReader
from horizon_broker.broker.direct_lookup.file_warming import warm_files
from horizon_broker.broker.engine.prepared import Prepared
from horizon_broker.broker.engine.route import (
    DirectRead,
    LookupTarget,
    Route,
    RouteKind,
    decide_route,
)

log = logging.getLogger("horizon.broker.engine")

SCHEMAS_KEPT = 1_024
"""Result schemas of lookup shapes kept (a shape is a table's columns and a select list)."""

WARM_TABLES_LOOKED_UP_WITHIN_S = 600.0
"""New files are read ahead only for tables with a direct lookup this recent: a table nobody
looks up by key costs nothing."""

DIRECT_ROUTE = "answered from the segment files with pyarrow (direct key lookup), no Spark job"


class DirectLookups:
    """Decides, per query, whether the files answer it, and counts the answers."""

    def __init__(
        self, config: SparkConfig, mode: Any, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.reader = DirectReader(max_rows=config.direct_lookup_max_rows)
        self.warm_s = config.direct_lookup_warm_s
        self._clock = clock
        self._looked_up: dict[str, tuple[float, tuple[str, ...]]] = {}
        """Per table (lower-case): when a lookup was last answered from its files, and the
        integer key columns lookups of it used."""
        self.enabled = config.direct_lookups and mode.direct_reads
        self.bypassed = (
            mode.bypass_reason if config.direct_lookups and not mode.direct_reads else ""
        )
        """Why direct lookups are configured but not used ("" when they are, or are off)."""
        if self.bypassed:
            log.warning("direct key lookups are bypassed: %s", self.bypassed)
        self.answers = 0
        self.answers_without_spark = 0
        """Answers whose schema came from an earlier lookup of the same shape: no call into
        Spark at all."""
        self._schemas: Lru[Hashable, pa.Schema] = Lru(SCHEMAS_KEPT)
        self._lock = threading.Lock()
        """Guards :attr:`_looked_up`."""

    def schema_key(self, prepared: Prepared) -> Hashable | None:
        """What fixes a lookup's result schema: the table's columns and the select list."""
        lookup = prepared.plan.shape.key_lookup
        if lookup is None or len(prepared.table_views) != 1:
            return None
        return (prepared.table_views[0].descriptor.to_json(), lookup.select)

    def known_schema(self, key: Hashable | None) -> pa.Schema | None:
        """The schema Spark gave an earlier lookup of this shape (None: not seen yet)."""
        if key is None:
            return None
        return self._schemas.get(key)

    def route(self, prepared: Prepared, engine_line: str) -> Route:
        """Where ``prepared``'s answer comes from (:func:`~horizon_broker.broker.engine.route.decide_route`,
        with what this broker knows), the reader of its files, and where Spark's schema of its
        shape is remembered: the one place a query asks whether the files answer it."""
        key = self.schema_key(prepared)
        route = decide_route(
            prepared,
            engine_line,
            enabled=self.enabled,
            bypassed=self.bypassed,
            known_schema=self.known_schema(key),
        )
        if key is not None:
            route.remember_schema = functools.partial(self.remember_schema, key)
        if route.target is not None:
            route.reader = self._reader(route, route.target)
        return route

    def remember_schema(self, key: Hashable | None, schema: pa.Schema) -> None:
        if key is not None:
            self._schemas.put(key, schema)

    def _reader(self, route: Route, target: LookupTarget) -> DirectRead:
        """Reads ``target`` from its files; an answer counts, rewrites ``route``'s notes and
        marks the table as looked up (its new files are then read ahead)."""
        without_spark = route.kind is RouteKind.FILES

        def read(schema: pa.Schema) -> pa.Table | None:
            answer = self.reader.read(target.lookup, target.files, target.snapshot, schema)
            if answer is not None:
                self.answers += 1
                if without_spark:
                    self.answers_without_spark += 1
                route.notes[:] = [DIRECT_ROUTE]
                self._remember_lookup(
                    target.table.table, [p.column for p in target.lookup.predicates]
                )
            return answer

        return read

    def _remember_lookup(self, table: str, columns: Sequence[str]) -> None:
        key = table.lower()
        with self._lock:
            _, known = self._looked_up.get(key, (0.0, ()))
            self._looked_up[key] = (self._clock(), tuple(dict.fromkeys((*known, *columns))))

    def prepare(self, added: Mapping[str, Sequence[Any]]) -> None:
        """Read what lookups will need of the files of the segments ``added`` to each table (a
        follower preparer: the change waits at most :attr:`warm_s`), for tables looked up
        lately. Closed files too: until the LWM passes their ``validUntil`` (the commit that
        closed their rows, often a moment after the change), lookups read them."""
        if not self.enabled or self.warm_s <= 0:
            return
        now = self._clock()
        with self._lock:
            recent = {
                table: columns
                for table, (at, columns) in self._looked_up.items()
                if now - at <= WARM_TABLES_LOOKED_UP_WITHIN_S
            }
        deadline = now + self.warm_s
        for table, segments in added.items():
            columns = recent.get(table.lower())
            if columns is not None:
                warm_files(
                    [path for segment in segments for path in segment.location],
                    columns,
                    self.reader.footers,
                    self.reader.key_sets,
                    deadline=deadline,
                    clock=self._clock,
                )
