"""The demo's standing queries and its one key explained: a subscription follows the bank's total
while two more batches of transfers are ingested (the total never changes; the number of open
accounts does as some close), another follows a few accounts' balances delta by delta, and
ExplainKey says why an account that was updated and then closed has no row.

Each step takes the running demo (:class:`demo.run.Demo`): its client, generator, jobs, console
and checks. The subscriptions read through the gRPC client (:meth:`HorizonClient.subscribe`),
each on a thread and a connection of its own, as a dashboard would.
"""

from __future__ import annotations

import itertools
import operator
import queue
import threading
import time
from typing import Any

import numpy as np
import pyarrow as pa

from demo.tour import ACCOUNTS
from horizon_broker._core.errors import Internal
from horizon_broker._core.hlc import format_snapshot

TOTAL_SQL = "SELECT COUNT(*) AS accounts, SUM(balance) AS total FROM accounts"
LIVE_BATCHES = 2
WATCHED_PER_BATCH = 2
WAIT_S = 120.0
"""How long a step waits for a delta before the demo fails (a hang, not a timing check)."""


class Followed:
    """A subscription read on a thread of its own, on a connection of its own (closing it ends
    the stream): its messages applied to a :class:`LiveResult` as they come."""

    def __init__(self, target: str, sql: str) -> None:
        from horizon_broker.broker.subscribe.live import LiveResult
        from horizon_broker.client import connect

        self.sql = sql
        self.client = connect(target)
        self.live = LiveResult()
        self.deltas: list[Any] = []
        self._steps: queue.Queue[Any] = queue.Queue()
        self._last: pa.Table | None = None
        self._thread = threading.Thread(target=self._read, name="demo-subscriber", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for message in self.client.subscribe(self.sql):
                if message.kind == "delta":
                    self.deltas.append(message)
                if self.live.apply(message):
                    self._steps.put((self.live.snapshot, self.live.table))
        except Exception as error:  # the stream's end, handed to the waiting step
            self._steps.put(error)

    def until(self, expected: list[dict[str, Any]] | None = None) -> pa.Table:
        """The subscriber's answer once it is ``expected`` (None: its first result). A
        snapshot alone would not do: the LWM moves on past a batch with no change to send."""
        deadline = time.monotonic() + WAIT_S
        last = self._last
        if expected is not None and last is not None and _sorted(last) == _sorted(expected):
            return last  # a batch that changed nothing the query shows sends no delta
        while True:
            try:
                step = self._steps.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise Internal(f"the answer of {self.sql!r} never became {expected}") from None
            if isinstance(step, Exception):
                raise step
            self._last = step[1]
            if expected is None or _sorted(step[1]) == _sorted(expected):
                return step[1]

    def close(self) -> None:
        self.client.close()
        self._thread.join(timeout=10)


def _sorted(rows: pa.Table | list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows if isinstance(rows, list) else rows.to_pylist(), key=repr)


def _books(accounts: list[int], balances: np.ndarray, closed: set[int]) -> list[dict[str, Any]]:
    """The per-account query's answer by the generator's books."""
    return [
        {"account_id": a, "owner": f"owner-{a % 9973}", "balance": int(balances[a])}
        for a in accounts
        if a not in closed
    ]


def _changed(before: np.ndarray, after: np.ndarray, count: int) -> list[int]:
    return [int(a) for a in np.flatnonzero(before != after)[:count]]


def _print_deltas(demo: Any, followed: Followed, label: str) -> None:
    from horizon_broker.render import result_table

    for message in followed.deltas:
        title = (
            f"{label}: delta {format_snapshot(message.from_snapshot)} -> "
            f"{format_snapshot(message.to_snapshot)} ({message.strategy})"
        )
        demo.console.print(result_table(message.rows, title=title))


def _ingest_live_batches(
    demo: Any, batches: list[pa.Table], expected: list[dict[Followed, list[dict[str, Any]]]]
) -> None:
    """Ingest each batch on both servers; wait until each subscriber's answer is the books'."""
    for number, batch, answers in zip(
        range(len(demo.batch_files), len(demo.batch_files) + len(batches)),
        batches,
        expected,
        strict=True,
    ):
        demo._write_batch(number, batch)
        high = max(demo._ingest(server) for server in demo.jobs)  # the fast one, then the slow
        lwm = demo.wait_for_lwm(ACCOUNTS, high)
        closes = int(np.count_nonzero(batch.column("deleted").to_numpy()))
        demo.console.print(
            f"  batch {number}: {batch.num_rows:,} changes ({closes} closes) ingested by both "
            f"servers, LWM {format_snapshot(lwm)}"
        )
        for followed, answer in answers.items():
            followed.until(answer)


def show_subscriptions(demo: Any) -> list[tuple[list[int], np.ndarray]]:
    """Two batches ingested under two subscriptions; each batch's closed accounts and the
    balances before it."""
    demo.heading("8. Standing queries: the bank's total, live, while transfers are ingested")
    started = time.perf_counter()
    generator = demo.generator
    balances = [generator.balances]
    batches = []
    for _ in range(LIVE_BATCHES):
        batches.append(generator.next_batch())
        balances.append(generator.balances)
    watched = sorted(
        {a for i in range(LIVE_BATCHES) for a in _changed(balances[i], balances[i + 1], 2)}
    )
    accounts_sql = (
        f"SELECT account_id, owner, balance FROM accounts WHERE account_id IN "
        f"({', '.join(map(str, watched))})"
    )
    demo.console.print(f"  client.subscribe([cyan]{TOTAL_SQL!r}[/cyan])")
    demo.console.print(f"  client.subscribe([cyan]{accounts_sql!r}[/cyan])")
    total, accounts = (
        Followed(demo.broker.target, TOTAL_SQL),
        Followed(demo.broker.target, accounts_sql),
    )
    closed = [b.filter(b.column("deleted")).column("account_id").to_pylist() for b in batches]
    try:
        first = total.until().to_pylist()[0]
        accounts.until()
        demo.console.print(
            f"  first result at {format_snapshot(total.live.snapshot)}: {first['accounts']:,} "
            f"accounts, total {first['total']:,} ({total.live.strategy})"
        )
        expected = []
        for after, gone in zip(
            balances[1:], itertools.accumulate(map(set, closed), operator.or_), strict=True
        ):
            expected.append({
                total: [{"accounts": first["accounts"] - len(gone), "total": first["total"]}],
                accounts: _books(watched, after, gone),
            })  # fmt: skip
        _ingest_live_batches(demo, batches, expected)
    finally:
        total.close()
        accounts.close()
    _print_deltas(demo, total, "the total")
    _print_deltas(demo, accounts, "a few accounts")
    _check_subscriptions(demo, total, accounts, first, balances)
    if demo.broker.console is not None:
        demo.console.print(f"  the console shows a live table too: {demo.broker.console.url}live")
    demo.report.timings["subscriptions_s"] = elapsed = time.perf_counter() - started
    demo.console.print(f"  [dim]two batches under two subscriptions in {elapsed:.1f} s[/dim]")
    return list(zip(closed, balances, strict=False))


def _check_subscriptions(
    demo: Any, total: Followed, accounts: Followed, first: dict[str, Any], balances: list[Any]
) -> None:
    expected = demo.generator.config.total
    totals = [first["total"]] + [
        row["total"]
        for message in total.deltas
        for row in message.rows.to_pylist()
        if row["_change_type"] in ("insert", "update_after")
    ]
    demo.check(
        "subscription: the bank's total is the same in the first result and every delta",
        bool(total.deltas) and set(totals) == {expected},
        f"{len(total.deltas)} deltas, totals {sorted(set(totals))} (expected {expected:,}); "
        f"open accounts {first['accounts']:,} -> {demo.generator.open_accounts:,}",
    )
    snapshot = accounts.live.snapshot
    direct = demo.client.query(
        accounts.sql.replace("FROM accounts", f"FROM accounts VERSION AS OF {snapshot}")
    )
    assert accounts.live.table is not None
    demo.check(
        "subscription: the first result plus every delta is the query's answer",
        len(accounts.deltas) >= LIVE_BATCHES
        and _sorted(accounts.live.table) == _sorted(direct)
        and {r["account_id"]: r["balance"] for r in direct.to_pylist()}
        == {a: int(balances[-1][a]) for a in direct.column("account_id").to_pylist()},
        f"{len(accounts.deltas)} deltas of {accounts.live.table.num_rows} watched accounts, "
        f"equal to the query at {format_snapshot(snapshot)} and to the generator's books",
    )


def _updated_then_closed(demo: Any, live_batches: list[tuple[list[int], np.ndarray]]) -> int | None:
    """An account a live batch closed whose balance an earlier batch had changed."""
    initial = demo.generator.config.initial_balance
    for closes, before in live_batches:
        for account in sorted(closes):
            if before[account] != initial:
                return int(account)
    return None


def show_key_explained(demo: Any, live_batches: list[tuple[list[int], np.ndarray]]) -> None:
    from horizon_broker.broker._proto.horizon.v1 import horizon_pb2 as pb
    from horizon_broker.render import print_key_explanation

    demo.heading("9. Why is this row (not) here? One account explained")
    account = _updated_then_closed(demo, live_batches)
    if account is None:
        demo.console.print("  (no account was updated and then closed in this run)")
        return
    demo.console.print(f"  account {account}: updated by a transfer, then closed (deleted)")
    demo.console.print(f"  client.explain_key([cyan]{ACCOUNTS!r}, {account}[/cyan])  (horizon why)")
    answer = demo.client.explain_key(ACCOUNTS, account)
    print_key_explanation(demo.console, answer)
    reasons = {version.reason for version in answer.versions}
    rows = demo.client.query(
        f"SELECT * FROM accounts VERSION AS OF {answer.snapshot} WHERE account_id = {account}"
    )
    wanted = {pb.KEY_VERSION_REASON_SUPERSEDED, pb.KEY_VERSION_REASON_DELETED}
    demo.check(
        "ExplainKey: an updated then closed account shows a superseded and a deleted version",
        wanted <= reasons and pb.KEY_VERSION_REASON_VISIBLE not in reasons and rows.num_rows == 0,
        f"account {account} at {format_snapshot(answer.snapshot)}: {len(answer.versions)} "
        f"stored copies; {answer.summary}",
    )
