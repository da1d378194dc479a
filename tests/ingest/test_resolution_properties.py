"""Key resolution across batches against the plain-Python replay, on random changelogs.

Few keys and a narrow range of comparison values force what goes wrong in practice: ties, records
older than the current version (in the same batch and across batches), null comparison values,
deletes and re-inserts, several records of one key in one batch.
"""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from horizon_broker.ingest import key_index
from horizon_broker.ingest.job import IngestJob
from tests.ingest.conftest import (
    Change,
    accounts_table,
    broker_view,
    replay,
    segment_rows,
    stamp,
    visible_at,
)
from tests.ingest.test_pipeline import frame

_example = itertools.count()

changes_strategy = st.lists(
    st.builds(
        Change,
        user_id=st.sampled_from(["a", "b", "c", "d"]),
        balance=st.integers(0, 999),
        seq=st.one_of(st.none(), st.integers(1, 4)),
        deleted=st.booleans(),
    ),
    min_size=1,
    max_size=14,
)


@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(changes=changes_strategy, cuts=st.lists(st.integers(1, 13), max_size=3))
def test_every_snapshot_shows_the_replay_of_the_changelog_up_to_it(
    spark: Any,
    server: Any,
    follower: Any,
    tmp_path: Any,
    monkeypatch: Any,
    changes: list[Change],
    cuts: list[int],
) -> None:
    # Two key index levels at most: batches alternate between writing the changed entries on
    # top of the index and writing it whole again.
    monkeypatch.setattr(key_index, "MAX_INDEX_LEVELS", 2)
    n = next(_example)
    name = f"random{n}"
    table = accounts_table(tmp_path / name, name=name, out_of_order="store")
    client = server(f"s{n}")
    job = IngestJob(spark, table, client).start()
    bounds = sorted({0, *[c for c in cuts if c < len(changes)], len(changes)})
    log: list[tuple[int, Change]] = []
    for start, end in itertools.pairwise(bounds):
        batch = changes[start:end]
        result = job.run_batch(frame(spark, batch))
        log.extend(stamp(batch, result.base))
        view = broker_view(follower, client, name)
        stored = segment_rows(spark, view.visible_segments)
        for snapshot in sorted({ts for ts, _ in log if ts <= view.lwm} | {view.lwm}):
            rows = visible_at(stored, snapshot)
            keys = [row["user_id"] for row in rows]
            assert len(keys) == len(set(keys)), f"a key is visible twice at {snapshot}: {keys}"
            assert {row["user_id"]: Change(**row) for row in rows} == replay(log, snapshot)
