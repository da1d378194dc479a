"""What the passes learn about a query, carried on the tree between passes.

Passes take and return a sqlglot tree; what one pass finds for the next (the resolved references,
the snapshot) lives in ``tree.meta["horizon"]`` as a :class:`RewriteState`, so no pass walks the
tree again to rediscover it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from sqlglot import exp

from horizon_broker.broker.sql.catalog import CatalogTable
from horizon_broker.broker.sql.model import QueryShape

META_KEY = "horizon"


class ReferenceKind(Enum):
    SCAN = "scan"
    CHANGES = "changes"


@dataclass(slots=True)
class Reference:
    """One place in the query that reads a registered table."""

    node: exp.Table
    table: CatalogTable
    kind: ReferenceKind
    written: str
    change_window: tuple[int, int] | None = None


@dataclass(slots=True)
class RewriteState:
    references: list[Reference] = field(default_factory=list)
    snapshot: int | None = None
    snapshot_source: str | None = None
    shape: QueryShape = field(default_factory=QueryShape)
    raw_backslash: bool = False
    """The text had a backslash: Spark's escapes in literals are not reproduced outside Spark."""
    amplifies: bool = False
    """The tree has an expression that makes values larger than its inputs (found by
    check_budget's walk; :mod:`horizon_broker.broker.sql.passes.check_value_sizes` runs only then)."""


def state_of(tree: exp.Expr) -> RewriteState:
    """The state attached to ``tree`` (created empty on first use)."""
    state = tree.meta.get(META_KEY)
    if state is None:
        state = RewriteState()
        tree.meta[META_KEY] = state
    return state
