"""What applying one update's announcement costs the broker's follower (part of ``bench.timeline``).

The updater replaces many overwrite segments of one time chunk at a time; the follower applies the
announcement to the table's timeline, settling the chunk's group states, while key lookups wait
for the interpreter.
"""

from __future__ import annotations

from typing import Any

from bench.timeline_rigs import GRANULARITIES, TABLE, chunk_at, first_generation, timed
from horizon_broker.timeline.segment import Segment
from horizon_broker.timeline.timeline import Timeline

REPLACES = ((20, 8), (200, 75), (400, 150))
"""(root segments of the chunk, overwrites an update replaces) of :func:`replace_scenario`."""


def replace_scenario(roots: int, replaced: int, rounds: int) -> dict[str, Any]:
    """What applying one update's announcement costs the follower: a chunk of ``roots`` first-
    generation segments, each overwritten once (one group per root, as the updater's rewrites
    leave them), whose ``replaced`` overwrites are replaced by the next minor version, one
    segment at a time (``Timeline.remove`` / ``add``) against one batch each
    (``remove_all`` / ``add_all``); best of ``rounds``, CPU time."""
    chunk = chunk_at(GRANULARITIES["DAY"], 0)
    version = "2011-01-01T00:00:00.000Z"

    def overwrite(partition: int, root: int, minor: int) -> Segment:
        return Segment(
            table=TABLE, interval=chunk, version=version, partition=partition,
            core_partitions=roots, root_start=root, root_end=root + 1, minor_version=minor,
        )  # fmt: skip

    first = [overwrite(32_768 + root, root, 1) for root in range(roots)]
    second = [overwrite(32_768 + roots + root, root, 2) for root in range(replaced)]
    best: dict[str, float] = {}
    for _ in range(rounds):
        for way in ("one_by_one", "batched"):
            timeline = Timeline(TABLE)
            timeline.add_all([*first_generation(chunk, version, roots), *first])
            if way == "one_by_one":

                def apply(timeline: Timeline = timeline) -> None:
                    for segment in first[:replaced]:
                        timeline.remove(segment)
                    for segment in second:
                        timeline.add(segment)

            else:

                def apply(timeline: Timeline = timeline) -> None:
                    timeline.remove_all(first[:replaced])
                    timeline.add_all(second)

            best[way] = min(best.get(way, float("inf")), timed(apply) * 1000)
    return {
        "roots": roots, "segments": 2 * roots, "replaced": replaced,
        "one_by_one_ms": best["one_by_one"], "batched_ms": best["batched"],
        "ratio": best["one_by_one"] / best["batched"] if best["batched"] else float("inf"),
    }  # fmt: skip
