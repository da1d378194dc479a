"""Where a prepared query's answer comes from, decided once per preparation.

Three routes (pure: :func:`decide_route` reads the prepared query and what the engine knows):

- :attr:`RouteKind.FILES`: a plain key lookup of a shape Spark analysed before. The segment files
  answer it with the schema Spark gave that shape, without any call into Spark; should the
  reader decline, Spark runs it.
- :attr:`RouteKind.SPARK_SCHEMA_THEN_FILES`: a plain key lookup of a shape not seen yet. Spark
  analyses it (its schema is remembered for the shape), then the files answer it, no job.
- :attr:`RouteKind.SPARK`: everything else, and every lookup while direct lookups are off or
  bypassed (Spark on a cluster or behind Connect reads files the broker may not see).

:class:`~horizon_broker.broker.engine.direct.DirectLookups` adds the reader of the files and
where Spark's schema is remembered; the engine then runs the route as it is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

import pyarrow as pa

from horizon_broker.broker.engine.prepared import Prepared, TableReadInfo
from horizon_broker.broker.sql.model import KeyLookup

DirectRead = Callable[[pa.Schema], pa.Table | None]
"""Reads a key lookup's whole answer from the files with the given schema (None: ask Spark)."""


class RouteKind(Enum):
    FILES = "the files answer with a known schema"
    SPARK_SCHEMA_THEN_FILES = "Spark gives the schema, the files answer"
    SPARK = "a Spark job"


@dataclass(frozen=True, slots=True)
class LookupTarget:
    """What the files are read for: one table's key lookup at one snapshot."""

    table: TableReadInfo
    lookup: KeyLookup
    snapshot: int
    files: tuple[str, ...]
    """The table's files that can hold a row visible at ``snapshot``."""


@dataclass(slots=True)
class Route:
    """A query's route, with what running it needs."""

    kind: RouteKind
    notes: list[str]
    """What the query's metadata says of where the answer came from (the reader rewrites it
    when the files answered)."""
    target: LookupTarget | None = None
    known_schema: pa.Schema | None = None
    """Spark's schema of the lookup's shape, from an earlier lookup (the FILES route)."""
    reader: DirectRead | None = None
    remember_schema: Callable[[pa.Schema], None] | None = None
    """Told the schema Spark analysed, so later lookups of the shape skip Spark."""

    def describe(self) -> str:
        return "; ".join(self.notes)

    @property
    def reader_after_analysis(self) -> DirectRead | None:
        """The reader Spark's stream may answer with once it has the schema: only for a new
        shape (a known shape's files were tried already, before Spark was asked)."""
        return self.reader if self.kind is RouteKind.SPARK_SCHEMA_THEN_FILES else None


def lookup_target(prepared: Prepared) -> LookupTarget | None:
    """The key lookup the files could answer: one table read at a snapshot by a plain key
    lookup (the rewrite recognised it), else None."""
    if len(prepared.tables) != 1 or len(prepared.plan.tables_read) != 1:
        return None
    table = prepared.tables[0]
    lookup = prepared.plan.shape.key_lookup
    if table.snapshot is None or lookup is None:
        return None
    return LookupTarget(table, lookup, table.snapshot, table.files_visible_at(table.snapshot))


def decide_route(
    prepared: Prepared,
    engine_line: str,
    *,
    enabled: bool,
    bypassed: str,
    known_schema: pa.Schema | None,
) -> Route:
    """The route of ``prepared``. ``engine_line`` names the Spark mode; ``enabled``: the broker
    may read the files (``bypassed``: why not, when direct lookups are configured but the mode
    forbids them); ``known_schema``: Spark's schema of this lookup shape, if seen before."""
    notes = [engine_line]
    target = lookup_target(prepared)
    if target is None:
        return Route(RouteKind.SPARK, notes)
    if not enabled:
        if bypassed:
            notes.append(f"direct key lookup bypassed: {bypassed}")
        return Route(RouteKind.SPARK, notes)
    if known_schema is None:
        return Route(RouteKind.SPARK_SCHEMA_THEN_FILES, notes, target)
    return Route(RouteKind.FILES, notes, target, known_schema)
