"""One subscription's thread: its first result, then a delta each time its tables' LWM moves.

Every answer is an ExecuteQuery of the query at ``VERSION AS OF`` one snapshot, through the
engine (grants, budgets, admission, the result cache). Between deltas the thread waits on the
follower's change signal (the follower wakes it when the state store moves an LWM), never polling
the store. Its messages go through a bounded pipe: while the subscriber does not read, the thread
waits, and its next delta then covers every snapshot since the last one it sent (a coalesced
range, :mod:`.coalesce`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from horizon_broker._core.errors import DeadlineExceeded, InvalidArgument, Unavailable
from horizon_broker.broker._proto.horizon.v1 import horizon_pb2 as pb
from horizon_broker.broker.engine import QueryEngine
from horizon_broker.broker.grants import Principal
from horizon_broker.broker.spark.executor import QueryScope

from . import resume
from .choose import check_name, volatile
from .coalesce import DEFAULT_MAX_ROWS_PER_MESSAGE, MAX_ROWS_PER_MESSAGE, next_range
from .handover import RESUME_TOKEN_TRAILER, HandOver, SubscriberBehind
from .limits import STOPPING_MESSAGE, OpenSubscriptions
from .messages import delta_messages, first_result_messages, progress_message, resumed_message
from .quiet import pending_since, quiet_since
from .recording import RecordedSubscription
from .snapshot_sql import at_snapshot
from .strategy import DeltaStrategy, Reads, choose_strategy

WAKE_S = 0.5
"""How often a waiting subscription looks whether it was ended (the follower wakes it sooner)."""
PENDING_WAIT_S = 1.0
"""How long a subscription waits for the LWM to reach a commit whose files the timeline already
shows before it runs the window below it anyway (:func:`.quiet.pending_commit`): a commit is
usually reached within a batch's time (0.3 s at 1M rows in ``bench.subscribe``); a slower one
delays a delta hidden in its files by this much at most."""


@dataclass(frozen=True, slots=True)
class SubscriptionPlan:
    """A checked Subscribe request."""

    sql: str
    resume_token: str
    max_rows: int
    strategy: str = ""
    """A strategy the request forced (empty: the broker chooses)."""


def subscription_plan(request: pb.SubscribeRequest) -> SubscriptionPlan:
    """Check a request's fields (INVALID_ARGUMENT naming the one that is wrong)."""
    if not request.sql.strip():
        raise InvalidArgument("sql is required: the SELECT to subscribe to")
    rows = request.max_rows_per_message or DEFAULT_MAX_ROWS_PER_MESSAGE
    if not 0 < rows <= MAX_ROWS_PER_MESSAGE:
        raise InvalidArgument(
            f"max_rows_per_message must be between 1 and {MAX_ROWS_PER_MESSAGE} (0: "
            f"{DEFAULT_MAX_ROWS_PER_MESSAGE}), got {request.max_rows_per_message}"
        )
    if request.resume_token:
        resume.decode(request.resume_token, request.sql)
    return SubscriptionPlan(request.sql, request.resume_token, rows, check_name(request.strategy))


def result_key(columns: Sequence[str], primary_keys: Sequence[Sequence[str]]) -> tuple[str, ...]:
    """The first read table's primary key whose columns are all in the result (none: ())."""
    for key in primary_keys:
        if key and set(key) <= set(columns):
            return tuple(key)
    return ()


def answer_at(
    engine: QueryEngine, principal: Principal, sql: str, is_active: Callable[[], bool]
) -> pa.Table:
    """``sql``'s whole answer, run as ExecuteQuery runs it."""
    scope = QueryScope(
        "subscribe", deadline=time.monotonic() + engine.config.limits.query_timeout_s
    )
    execution = engine.execute(sql, principal, scope, is_active=is_active)
    try:
        return pa.Table.from_batches(list(execution.batches()), schema=execution.schema)
    finally:
        execution.close()


def newest_snapshot(follower: Any, tables: Sequence[str]) -> int | None:
    """The snapshot a default read of ``tables`` would use now (None: not readable now)."""
    try:
        return min(follower.lwm(table) for table in tables)
    except Exception:  # stale or no LWM yet: the wait goes on, a query would say why
        return None


def pending_commit_of(follower: Any, tables: Sequence[str], start: int, to: int) -> int | None:
    """The greatest instant a commit above ``to`` reaches, when only such commits keep the
    window from ``start`` from being quiet in every table (:func:`.quiet.pending_commit`)."""
    reached = []
    for table in tables:
        segments = follower.view(table).visible_segments
        if quiet_since(segments, start):
            continue
        commit = pending_since(segments, start, to)
        if commit is None:
            return None
        reached.append(commit)
    return max(reached, default=None)


def _lwm_reached(
    follower: Any, tables: Sequence[str], commit: int, ended: Callable[[], bool]
) -> Callable[[Any], bool]:
    """The follower's wake-up test: every table's LWM reached ``commit``, or the stream ended."""

    def reached(_: Any) -> bool:
        lwm = newest_snapshot(follower, tables)
        return ended() or (lwm is not None and lwm >= commit)

    return reached


def wait_for_commit(
    follower: Any,
    tables: Sequence[str],
    window: tuple[int, int],
    ended: Callable[[], bool],
    patience_s: float = PENDING_WAIT_S,
) -> int | None:
    """The snapshot to query the window ``(start, newest]`` up to: ``newest``, or a later one
    when the window is not quiet only because of a commit the LWM has not reached yet (its
    files are in the timeline). The LWM is given ``patience_s`` to reach it, so one query
    covers the window and the commit, and the commit's delta does not wait behind a query of
    the window below it (None: ``ended`` meanwhile). Only the commit seen first is waited for,
    never a later one (under steady ingestion a later one is always on its way). Only for a
    query the quiet rule applies to (:attr:`Subscription.skips_quiet`)."""
    start, newest = window
    pending = pending_commit_of(follower, tables, start, newest)
    if pending is None:
        return newest
    follower.wait_for(_lwm_reached(follower, tables, pending, ended), patience_s)
    if ended():
        return None
    return max(newest, newest_snapshot(follower, tables) or newest)


class Subscription:
    """The thread's side of one subscription: its strategy and where the stream stands."""

    def __init__(
        self,
        engine: QueryEngine,
        principal: Principal,
        plan: SubscriptionPlan,
        pipe: Any,
        record: RecordedSubscription | None = None,
    ) -> None:
        self.engine = engine
        self.principal = principal
        self.plan = plan
        self.pipe = pipe
        self.record = record
        prepared = engine.prepare(plan.sql, principal)
        self.tables = [t.table for t in prepared.tables if t.snapshot is not None]
        if not self.tables or prepared.plan.snapshot is None:
            raise InvalidArgument(
                "a subscription follows the snapshots of upsert tables; this query reads none"
            )
        self.start_snapshot = prepared.plan.snapshot
        self.skips_quiet = len(self.tables) == len(prepared.tables) and volatile(plan.sql) is None
        """Whether a window the timeline shows to be quiet needs no query: the query reads only
        upsert tables at the snapshot, and no function that changes without the data."""
        follower = engine.follower
        keys = [follower.descriptor(table).primary_key for table in self.tables]
        self.key = result_key(engine.result_schema(prepared).names, keys)
        reads = Reads(plan.sql, tuple(self.tables), self.key, self._run, self._query)
        descriptors = [follower.descriptor(table) for table in self.tables]
        self.strategy: DeltaStrategy = choose_strategy(reads, descriptors, plan.strategy)
        if record is not None:
            record.following(self.tables)

    def _run(self, snapshot: int) -> pa.Table:
        sql = at_snapshot(self.plan.sql, self.tables, snapshot)
        return self._query(sql)

    def _query(self, sql: str) -> pa.Table:
        return answer_at(self.engine, self.principal, sql, lambda: not self.pipe.closed)

    def token(self, snapshot: int) -> str:
        return resume.encode(self.plan.sql, {table: snapshot for table in self.tables})

    def begin(self) -> int:
        """Send the first result (or, resuming, the resumed header); the snapshot sent."""
        if self.plan.resume_token:
            at = resume.decode(self.plan.resume_token, self.plan.sql)
            self.strategy.resume(at)
            self.pipe.put(resumed_message(self.strategy.name, at, self.token(at)))
            self._sent(at, 0)
            return at
        at = self.start_snapshot
        rows = self.strategy.start(at)
        name, token = self.strategy.name, self.token(at)
        for message in first_result_messages(rows, name, self.key, at, token, self.plan.max_rows):
            self.pipe.put(message)
        self._sent(at, rows.num_rows)
        return at

    def _sent(self, snapshot: int, rows: int) -> None:
        if self.record is not None:
            self.record.sent(snapshot, rows)

    def wait_for_move(self, queried: int, stopping: Any) -> int | None:
        """The newest snapshot once it is past ``queried`` (None: ended meanwhile)."""
        follower = self.engine.follower

        def moved(_: Any) -> bool:
            if stopping.is_set() or self.pipe.closed:
                return True
            newest = newest_snapshot(follower, self.tables)
            return newest is not None and newest > queried

        while not follower.wait_for(moved, WAKE_S):
            pass
        if stopping.is_set() or self.pipe.closed:
            return None
        return newest_snapshot(follower, self.tables)

    def send_delta(self, start: int, to: int) -> bool:
        """Send the changes from ``start`` to ``to``. When there were none (the commits touched
        no row the query shows, or only compaction and rewrites, which change no rows), a
        progress message (no rows, the token from ``to``), only if the subscriber has room for
        it: a quiet stream never makes a subscriber that does not read fall behind. A window in
        which the timeline shows no version beginning or ending runs no query at all. True when
        the subscriber was brought to ``to``."""
        quiet = self.skips_quiet and self._quiet_since(start)
        delta = None if quiet else self.strategy.advance(to)
        name, token = self.strategy.name, self.token(to)
        if delta is None or delta.empty:
            if not self.pipe.offer(progress_message(name, start, to, token)):
                return False  # the next message's range covers this snapshot too
            self._sent(to, 0)
            return True
        for message in delta_messages(delta, name, start, to, token, self.plan.max_rows):
            self.pipe.put(message)
        self._sent(to, delta.rows.num_rows)
        return True

    def _quiet_since(self, start: int) -> bool:
        """No version of the query's tables began or ended after ``start`` (:mod:`.quiet`): the
        answer is the one at ``start``, and the strategy's next window simply starts earlier."""
        follower = self.engine.follower
        return all(quiet_since(follower.view(t).visible_segments, start) for t in self.tables)

    def follow(self, stopping: Any) -> None:
        """Deltas until the subscriber leaves or the broker stops (then UNAVAILABLE)."""
        sent_to = queried = self.begin()
        while True:
            newest = self.wait_for_move(queried, stopping)
            if newest is not None and self.skips_quiet:
                newest = wait_for_commit(
                    self.engine.follower,
                    self.tables,
                    (sent_to, newest),
                    lambda: stopping.is_set() or self.pipe.closed,
                )
            if newest is None:
                break
            span = next_range(sent_to, newest)
            if span is not None and self.send_delta(*span):
                sent_to = span[1]
            queried = newest
        if stopping.is_set():
            raise Unavailable(STOPPING_MESSAGE)


def produce_subscription(
    engine: QueryEngine,
    principal: Principal,
    plan: SubscriptionPlan,
    pipe: HandOver,
    subscriptions: OpenSubscriptions,
    source: str,
) -> None:
    """The subscription's own thread: it holds one of the identity's subscriptions and its
    record in the query registry while it runs; its messages go into ``pipe``, which ends with
    the error that ended it (the call answers with it)."""
    record = RecordedSubscription(engine.queries, principal.name, plan.sql, source)
    try:
        with subscriptions.open(principal.name):
            subscription = Subscription(engine, principal, plan, pipe, record)
            subscription.follow(subscriptions.stopping)
    except BaseException as error:  # handed to the call, which answers with it
        record.ended(error)
        pipe.finish(error)
    else:
        record.ended(None)


def ending_trailers(error: BaseException, pipe: HandOver) -> tuple[tuple[str, str], ...]:
    """The trailers of a stream ended by ``error``: the last resume token it sent."""
    token = error.resume_token if isinstance(error, SubscriberBehind) else pipe.last_token
    return ((RESUME_TOKEN_TRAILER, token),) if token else ()


async def relay_subscription(pipe: HandOver, context: Any, stopping: Any) -> None:
    """Write the subscription's messages to the call as the subscriber reads them; the
    thread's error is raised (the last resume token sent in its trailers), and UNAVAILABLE
    when the broker stops."""
    loop = asyncio.get_running_loop()
    while True:
        try:
            item = await pipe.get(loop.time() + WAKE_S)
        except DeadlineExceeded:
            if stopping.is_set():
                item = Unavailable(STOPPING_MESSAGE)
            else:
                continue
        if isinstance(item, BaseException):
            context.set_trailing_metadata(ending_trailers(item, pipe))
            raise item
        if not isinstance(item, pb.SubscribeResponse):
            return
        await context.write(item)
