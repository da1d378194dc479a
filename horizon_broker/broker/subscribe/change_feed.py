"""The change-feed strategy: a filter and projection of one upsert table, from its change feed.

Only the keys that changed between two snapshots can change the answer, and the table's change
feed (``table_changes``) names them with their rows: each such key's row at the last snapshot
and at the new one, the query's projection and filter applied to both
(:func:`.incremental_sql.feed_images_sql`), is the changed part of both answers. Their
difference by the primary key is the delta: a row leaving the filter is a ``delete``, one
entering it an ``insert``, a changed one an update pair, and a key whose rows project to the
same result row (a rewrite, a compaction, a change of a column the query does not show) no
change. Nothing of the answer is held: a resumed stream costs no query.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from .choose import CHANGE_FEED, Choice
from .diff import Delta, diff
from .incremental_sql import AFTER, BEFORE, SIDE, feed_images_sql

if TYPE_CHECKING:
    from .strategy import Reads


def split_images(images: pa.Table) -> tuple[pa.Table, pa.Table]:
    """The rows at the first snapshot and at the last one, without :data:`SIDE`."""
    side = images.column(SIDE)
    rows = images.drop_columns([SIDE])
    return rows.filter(pc.equal(side, BEFORE)), rows.filter(pc.equal(side, AFTER))


class ChangeFeed:
    """Deltas from the table's change feed between the two snapshots."""

    name = CHANGE_FEED

    def __init__(self, choice: Choice, reads: Reads) -> None:
        self._choice = choice
        self._reads = reads
        self._at: int | None = None

    def start(self, snapshot: int) -> pa.Table:
        self._at = snapshot
        return self._reads.run(snapshot)

    def resume(self, snapshot: int) -> None:
        self._at = snapshot

    def advance(self, to: int) -> Delta:
        assert self._at is not None, "start() or resume() first"
        images = self._reads.query(feed_images_sql(self._reads.sql, self._choice, self._at, to))
        before, after = split_images(images)
        self._at = to
        return diff(before, after, self._reads.key)
