"""The updater's broadcast join: hashed on validFrom alone, the key still compared."""

from __future__ import annotations

import re
from typing import Any

from horizon_broker.ingest.updater import join_broadcast_updates


def frames(spark: Any) -> tuple[Any, Any]:
    # One transaction's changes share a commit timestamp: a and b both begin at 10.
    data = spark.createDataFrame(
        [("a", 1, 10, None), ("b", 2, 10, None), ("c", 3, 11, None), (None, 4, 10, None)],
        "user_id string, balance bigint, validFrom bigint, validUntil bigint",
    )
    updates = spark.createDataFrame(
        [("a", 10, 20), ("b", 10, 30), (None, 10, 40)],
        "user_id string, validFrom bigint, validUntil bigint",
    )
    return data, updates


def test_updates_sharing_a_valid_from_each_reach_only_their_own_key(spark: Any) -> None:
    data, updates = frames(spark)
    joined = join_broadcast_updates(data, updates, ["user_id"])
    rows = sorted(
        (row["balance"], row["_newUntil"]) for row in joined.collect()
    )  # one row out per row in: no key matched twice, null keys never match
    assert rows == [(1, 20), (2, 30), (3, None), (4, None)]
    assert joined.columns == [*data.columns, "_newUntil"]


def test_the_broadcast_is_hashed_on_valid_from_alone(spark: Any) -> None:
    data, updates = frames(spark)
    joined = join_broadcast_updates(data, updates, ["user_id"])
    plan = joined._jdf.queryExecution().executedPlan().toString()
    assert re.search(
        r"BroadcastHashJoin \[validFrom#\d+L\], \[_updateFrom#\d+L\], LeftOuter", plan
    ), plan
