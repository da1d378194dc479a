"""The changed-groups strategy: a GROUP BY over one upsert table, re-run for touched groups only.

Between two snapshots only the groups a change entered or left can change: the change feed's
rows (every version that began or ended, both before and after images) that pass the query's
filter name them (:func:`.incremental_sql.touched_groups_sql`). The query is re-run at the new
snapshot for those groups only, and its rows replace the held rows of the same groups: their
difference is the delta. Each touched group's aggregates are computed afresh from its rows, so
min and max are rechecked (a group's minimum deleted) and avg is exact; a group left empty is
a ``delete``. A touched group whose key has no exact SQL literal (a timestamp, NaN), or too many
touched groups, re-run the whole query instead: slower, as exact.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from horizon_broker._core.errors import Internal

from .choose import CHANGED_GROUPS, Choice
from .diff import Delta, diff, frozen
from .incremental_sql import groups_at_sql, touched_groups_sql

if TYPE_CHECKING:
    from .strategy import Reads

MAX_LISTED_GROUPS = 1_000
"""More touched groups than this re-run the whole query (the SQL would grow past reason)."""


def group_rows(table: pa.Table, columns: list[str]) -> list[tuple]:
    """Each row's group, as hashable values."""
    cells = [table.column(name).to_pylist() for name in columns]
    return [tuple(frozen(v) for v in row) for row in zip(*cells, strict=True)]


def _column(answer: pa.Table, output: str) -> str:
    """The answer's column for a group's output name (Spark keeps or folds its case)."""
    for name in answer.column_names:
        if name.lower() == output.lower():
            return name
    raise Internal(f"the result has no column {output} for its GROUP BY")


class ChangedGroups:
    """Deltas from re-running the query for the groups the change feed touched."""

    name = CHANGED_GROUPS

    def __init__(self, choice: Choice, reads: Reads) -> None:
        self._choice = choice
        self._reads = reads
        self._answer: pa.Table | None = None
        self._at: int | None = None

    def start(self, snapshot: int) -> pa.Table:
        self._answer, self._at = self._reads.run(snapshot), snapshot
        return self._answer

    def resume(self, snapshot: int) -> None:
        self.start(snapshot)

    def resume_from(self, snapshot: int, answer: pa.Table) -> None:
        """Go on from ``snapshot``, whose ``answer`` the caller already ran."""
        self._answer, self._at = answer, snapshot

    def advance(self, to: int) -> Delta:
        assert self._answer is not None and self._at is not None, "start() or resume() first"
        held = self._answer
        touched = self._reads.query(touched_groups_sql(self._reads.sql, self._choice, self._at, to))
        values = group_rows(touched, touched.column_names)
        sql = (
            groups_at_sql(self._reads.sql, self._reads.tables, to, self._choice, values)
            if 0 < len(values) <= MAX_LISTED_GROUPS
            else None
        )
        if not values:
            after, before, kept = held.slice(0, 0), held.slice(0, 0), held
        elif sql is None:
            after, before, kept = self._reads.run(to), held, held.slice(0, 0)
        else:
            after = self._reads.query(sql)
            columns = [_column(held, group.output) for group in self._choice.groups]
            wanted = set(values)
            mask = pa.array([group in wanted for group in group_rows(held, columns)], pa.bool_())
            before, kept = held.filter(mask), held.filter(pc.invert(mask))
        self._answer = pa.concat_tables([kept, after.select(held.column_names).cast(held.schema)])
        self._at = to
        return diff(before, after, self._reads.key)
