"""bench.subscribe's breakdown of a delta (pure): each commit's queries are those begun between
its batch and the next one, and its delta's query is the last begun before the delta arrived."""

from __future__ import annotations

from types import SimpleNamespace

from bench.subscribe_profile import ProfiledQuery, QueryProfile, breakdown


def _query(began: float, rows: int, views_s: float) -> ProfiledQuery:
    execution = SimpleNamespace(queued_s=0.0, rewrite_s=0.001, views_s=views_s, spark_s=0.2)
    return ProfiledQuery(began, True, f"group-{began}", execution, rows)


def test_each_commits_delta_is_the_last_query_begun_before_it_arrived() -> None:
    profile = QueryProfile()
    profile.queries += [
        _query(1.0, rows=0, views_s=0.5),  # the window below the first commit: nothing
        _query(1.2, rows=4, views_s=0.1),  # the first commit's delta
        _query(1.7, rows=0, views_s=0.7),  # after the first delta, before the next batch
        _query(2.1, rows=4, views_s=0.1),  # the second commit's delta
        _query(2.9, rows=0, views_s=0.9),  # after the second delta, before the next batch
    ]
    commits = [(0.9, 2.0, 1.5), (2.0, 3.0, 2.5)]  # (batch began, next batch began, delta arrived)
    spark_without_status_store = SimpleNamespace()
    split = breakdown(spark_without_status_store, profile, commits)
    assert split["delta_query_ms_p50"]["views"] == 100.0  # never 500, 700 nor 900
    assert split["queries_per_commit"] == 2  # 3 and 2 (nearest rank)
    assert split["empty_queries_per_commit"] == 1  # 2 and 1
