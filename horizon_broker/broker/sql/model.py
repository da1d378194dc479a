"""The rewriter's inputs besides SQL (limits) and its outputs (rewritten SQL and the plan)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class RewriteLimits:
    """Limits checked before and right after parsing, so a hostile text cannot exhaust the broker.

    ``max_nesting`` counts brackets, CASE blocks and runs of prefix operators in the token stream
    (what drives the parser's recursion); ``max_tree_depth`` bounds the parsed tree (long operator
    chains that nest without brackets).
    """

    max_sql_length: int = 100_000
    max_nesting: int = 100
    max_tree_depth: int = 1_000


@dataclass(frozen=True, slots=True)
class WorkBudget:
    """How much work one query may ask of the shared Spark, decided from its text before anything
    runs (:mod:`horizon_broker.broker.sql.passes.check_budget`). The defaults suit a laptop broker; every value is
    ``[limits]`` configuration."""

    max_generated_rows: int = 1_000_000_000
    """Rows one ``range(...)`` may generate."""
    max_array_elements: int = 10_000_000
    """Elements one ``sequence(...)`` / ``array_repeat(...)`` may make (arrays live in memory)."""
    max_string_length: int = 10_000_000
    """Characters one ``repeat``/``space``/``lpad``/``rpad`` may make."""
    max_partitions: int = 1_000
    """Partitions ``range(...)``'s fourth argument or a partitioning hint may ask for."""
    max_table_references: int = 64
    """Tables, CTE references and table functions one query may read."""
    max_cross_joins: int = 1
    """Joins without any join condition between sources of more than one row."""
    max_estimated_rows: int = 1_000_000_000
    """Rows a SELECT may build from its sources (stored rows; joins and generators multiply)."""
    max_value_size: int = 100_000_000
    """Characters and elements one value may hold, all nesting counted
    (:mod:`horizon_broker.broker.sql.passes.check_value_sizes`)."""
    max_grouping_sets: int = 1_024
    """Grouping sets one GROUP BY may ask for (``CUBE`` of n expressions asks for 2^n: each
    input row is copied once per set)."""


@dataclass(frozen=True, slots=True)
class TableRead:
    """One registered table the query reads, with what its substituted scan(s) read.

    ``snapshot`` is the snapshot of the table's plain references (None for an append-only table
    or when it is read only through ``table_changes``); ``change_windows`` lists the ``(from, to]``
    windows of its ``table_changes`` calls. ``source_view`` is the table's main temp view (see
    ``CatalogTable.main_view``); ``views`` lists every temp view its scans read (two when its
    settled segments are read apart).
    """

    name: str
    upsert: bool
    source_view: str
    snapshot: int | None
    segments: tuple[str, ...]
    files: tuple[str, ...]
    references: int
    change_windows: tuple[tuple[int, int], ...] = ()
    views: tuple[str, ...] = ()


Value = int | str


@dataclass(frozen=True, slots=True)
class Predicate:
    """``column`` equals one of ``values`` (lower-case column name, literals as Python values)."""

    column: str
    values: tuple[Value, ...]


@dataclass(frozen=True, slots=True)
class KeyLookup:
    """The plainest key lookup of ``table``, which the broker may answer from the files
    (:mod:`horizon_broker.broker.sql.passes.find_key_lookup`)."""

    table: str
    projection: tuple[str, ...] | None
    """Source columns of the result in order (lower-case); None for ``SELECT *``."""
    predicates: tuple[Predicate, ...]
    limit: int | None = None
    select: tuple[str, ...] = field(default=(), compare=False)
    """The select list as written (with aliases): with the table's columns it fixes the result's
    schema, so lookups differing only in their literals share one schema."""


@dataclass(frozen=True, slots=True)
class QueryShape:
    """What later stages ask of a query, found once on its tree
    (:mod:`horizon_broker.broker.sql.passes.describe_shape`): nothing after the rewrite parses the SQL again."""

    ordered: bool = True
    """The row order may be part of the answer (an ORDER BY anywhere)."""
    point_lookup: bool = False
    """One table, every key column fixed to literals: run on the lookup session."""
    uncacheable: str | None = None
    """Why the answer may differ between two runs at one snapshot (None: it cannot)."""
    key_lookup: KeyLookup | None = None
    """Set when the query is the plainest key lookup (answered from the files when possible)."""


@dataclass(frozen=True, slots=True)
class QueryPlan:
    """What a rewritten query reads: the broker checks access on ``tables_read`` and passthrough
    clients get the file lists from it.

    ``snapshot_source`` says how the snapshot was chosen: ``"default: min LWM"``,
    ``"VERSION AS OF"``, ``"TIMESTAMP AS OF"``, or None when no upsert table is scanned.
    """

    tables_read: tuple[TableRead, ...]
    snapshot: int | None
    snapshot_source: str | None
    change_feed: bool
    shape: QueryShape = QueryShape()

    @property
    def table_names(self) -> tuple[str, ...]:
        return tuple(read.name for read in self.tables_read)


@dataclass(frozen=True, slots=True)
class RewriteResult:
    """The rewritten Spark SQL (readable, shown by Explain and handed to passthrough clients),
    the SQL the broker runs (the same with the row cap planned as a ``LIMIT``), and the plan."""

    sql: str
    plan: QueryPlan
    capped_sql: str = ""
    """``sql`` with the broker's row cap as its outermost ``LIMIT`` ("" when no cap was asked)."""

    @property
    def run_sql(self) -> str:
        return self.capped_sql or self.sql
