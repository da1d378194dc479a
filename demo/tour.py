"""The demo's tour of what a reader sees: time travel and the change feed, the timeline, what
Spark runs (explain), and the same snapshot through Flight SQL. Each step takes the running demo
(:class:`demo.run.Demo`): its client, console and checks."""

from __future__ import annotations

import re
from typing import Any

from rich.table import Table

from demo.pictures import day, timeline_picture
from horizon_broker._core.hlc import format_snapshot

ACCOUNTS = "accounts"
EXPLAINED_SQL = (
    "SELECT owner, SUM(balance) AS total FROM accounts WHERE balance > 2000 "
    "GROUP BY owner ORDER BY total DESC LIMIT 5"
)


def show_time_travel(demo: Any) -> None:
    demo.heading("3. Time travel and the change feed")
    history = demo.report.lwm_history
    if len(history) < 3:
        demo.console.print("  (needs at least two batches)")
        return
    (_, first), (_, second) = history[1], history[2]
    sql = f"SELECT COUNT(*) AS accounts, SUM(balance) AS total FROM accounts VERSION AS OF {first}"
    answers = [demo.client.query(sql).to_pylist()[0] for _ in range(2)]
    demo.console.print(
        f"  VERSION AS OF {first} ({format_snapshot(first)}, after batch 1): {answers[0]['accounts']:,} accounts, "
        f"total {answers[0]['total']:,}"
    )
    demo.check(
        "time travel is repeatable and consistent",
        answers[0] == answers[1] and answers[0]["total"] == demo.generator.config.total,
        f"{answers[0]} twice",
    )
    changes_sql = (
        f"SELECT _change_type, COUNT(*) AS changes FROM table_changes('accounts', {first}, "
        f"{second}) GROUP BY _change_type ORDER BY _change_type"
    )
    changes = {
        row["_change_type"]: row["changes"] for row in demo.client.query(changes_sql).to_pylist()
    }
    view = Table(f"change type in ({format_snapshot(first)}, {format_snapshot(second)}]", "changes")
    for kind, count in changes.items():
        view.add_row(kind, f"{count:,}")
    demo.console.print(view)
    closes = demo.closes[1]
    demo.check(
        "change feed of batch 2 matches the changelog",
        changes.get("delete", 0) == closes
        and changes.get("update_preimage", 0) == changes.get("update_postimage", 0)
        and changes.get("insert", 0) == 0,
        f"{changes}; {closes} accounts closed in batch 2",
    )


# -- 4. the timeline -------------------------------------------------------------------------


def show_timeline(demo: Any) -> None:
    from horizon_broker.broker.api.timeline_picture import STATE_NAMES, timeline_svg

    demo.heading("4. The timeline of the accounts table")
    timeline = demo.client.timeline(ACCOUNTS, include_overshadowed=True)
    demo.console.print(timeline_picture(timeline, STATE_NAMES))
    view = Table(
        "time chunk",
        "complete",
        "read",
        "visible",
        "standby",
        "overshadowed",
        "segments",
        title=f"states (timeline generation {timeline.timeline_generation})",
    )
    for chunk in timeline.chunks:
        counts = {"visible": 0, "standby": 0, "overshadowed": 0}
        for group in chunk.groups:
            counts[STATE_NAMES.get(group.state, "standby")] += 1
        view.add_row(
            day(chunk.interval.start_ms),
            "yes" if chunk.complete else "no",
            "yes" if chunk.queried else "no",
            str(counts["visible"]),
            str(counts["standby"]),
            str(counts["overshadowed"]),
            str(sum(len(group.segments) for group in chunk.groups)),
        )
    demo.console.print(view)
    picture = demo.options.picture or demo.workdir / "accounts-timeline.svg"
    picture.write_text(timeline_svg(timeline))
    demo.console.print(f"  picture written to {picture}")
    overwrites = sum(
        1
        for chunk in timeline.chunks
        for group in chunk.groups
        if group.minor_version > 0 and STATE_NAMES.get(group.state) == "visible"
    )
    demo.check(
        "superseded versions are closed by visible overwrite segments",
        overwrites > 0 and all(chunk.queried for chunk in timeline.chunks if chunk.complete),
        f"{overwrites} visible overwrite groups (minor version >= 1) in "
        f"{len(timeline.chunks)} time chunks",
    )


# -- 5. explain ------------------------------------------------------------------------------


def show_explain(demo: Any) -> None:
    from horizon_broker.render import print_explain

    demo.heading("5. What Spark runs: the rewritten SQL of one query")
    demo.console.print(f"  client SQL: [cyan]{EXPLAINED_SQL}[/cyan]")
    explain = demo.client.explain(EXPLAINED_SQL)
    print_explain(demo.console, explain)
    history = demo.report.lwm_history
    if len(history) < 2:
        return
    # At the LWM, settled files of open versions need no test; an earlier snapshot must
    # test every version's validity.
    first = history[1][1]
    travel = demo.client.explain(
        EXPLAINED_SQL.replace("FROM accounts", f"FROM accounts VERSION AS OF {first}")
    )
    predicate = f"validFrom <= {first} AND (validUntil IS NULL OR validUntil > {first})"
    views = set(re.findall(r"__horizon_\w+", explain.rewritten_sql))
    demo.console.print(f"  at VERSION AS OF {first}, every scan tests: [cyan]{predicate}[/cyan]")
    demo.check(
        "explain: a past snapshot tests every version's validity",
        predicate in travel.rewritten_sql,
        f"{travel.rewritten_sql.count(predicate)} scan(s) with the full predicate at "
        f"{first}; at the LWM the query reads {', '.join(sorted(views))}",
    )


# -- 6. any Arrow tool: Flight SQL ---------------------------------------------------------


def show_flight_sql(demo: Any) -> None:
    demo.heading("6. Any Arrow tool: the same snapshot through Flight SQL (ADBC)")
    try:
        import adbc_driver_flightsql.dbapi as flight_sql
    except ImportError:
        demo.console.print("  (adbc-driver-flightsql is not installed: pip install '.[dev]')")
        return
    sql = f"SELECT count(*) AS open_accounts, sum(balance) AS total FROM {ACCOUNTS}"
    uri = f"grpc://{demo.broker.flight_target}"
    with flight_sql.connect(uri) as connection, connection.cursor() as cursor:
        cursor.execute(sql)
        answer = cursor.fetch_arrow_table()
    snapshot = int(answer.schema.metadata[b"horizon.snapshot"])
    native = demo.client.query(f"{sql} VERSION AS OF {snapshot}")
    demo.console.print(
        f"  adbc_driver_flightsql.dbapi.connect([cyan]{uri!r}[/cyan]).cursor().execute(...)\n"
        f"  {answer.to_pylist()[0]} at snapshot {format_snapshot(snapshot)} "
        f"(schema metadata horizon.snapshot_token = "
        f"{answer.schema.metadata[b'horizon.snapshot_token'].decode()})"
    )
    demo.check(
        "Flight SQL (ADBC) answers as ExecuteQuery at the same snapshot",
        answer.to_pylist() == native.to_pylist(),
        f"{answer.to_pylist()[0]} at {format_snapshot(snapshot)} through {uri}",
    )
