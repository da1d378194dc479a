"""The workload of a fault-injection run: writers, readers, and what they recorded.

* **Bank** (``bank``): accounts with balances, each server owning the accounts of its key
  partition; every change is a transfer between two of them (or a close, which moves the whole
  balance and deletes the account), committed as one source transaction (the ``txn`` column);
  now and then a late record (an older ``seq``), which must never show.
* **Register** (``register``): each key written with increasing values by one writer.
* **Quiet** (``quiet``): registers written now and then (about every ten seconds): between
  writes its partitions are idle, or parked while their server is stopped, and must not hold the
  others back.
* **Readers** query through the gRPC broker: the whole table at the LWM, at a pinned snapshot
  (``VERSION AS OF`` one seen a moment ago), at an old snapshot, a self-join, change feeds, and
  the bank with the quiet table in one query (one snapshot for both, with the client's monotonic
  session: it must be answered at once, not wait for the quiet table); one more reader sends no
  session token (default reads of one table): a broker serving below what it served shows on it.

The writers know every row they wrote; the servers' acknowledgements (:mod:`chaos.worker`) give
each file's first commit timestamp, from which each write's own follows (a transaction's changes
share the timestamp of its first change), so the history is the workload's, not the system's.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from chaos.cluster import BANK, QUIET, REGISTER
from chaos.history import History, Read, Row, Write

OPENING_BALANCE = 1_000
MAX_BACKLOG = 4
"""Files a server may have waiting before the writer stops feeding it."""
BANK_SQL = "SELECT account, txn, balance FROM bank"
REGISTER_SQL = "SELECT key, value FROM register"
SELF_JOIN_SQL = (
    "SELECT a.account, a.txn, a.balance FROM bank a JOIN bank b "
    "ON a.account = b.account AND a.txn = b.txn"
)
QUIET_SQL = "SELECT key, value FROM quiet"
BOTH_SQL = (
    "SELECT 'bank' AS t, account AS k, txn AS v, balance AS b FROM bank "
    "UNION ALL SELECT 'quiet' AS t, key AS k, CAST(value AS STRING) AS v, value AS b FROM quiet"
)
QUIET_EVERY = 50
"""Writer steps (one every 0.2 s at most) between two writes of the quiet table: about every ten
seconds, on a fixed cadence from the tenth step (by chance, a seeded 60 s run wrote it never, and
a batch on a quiet partition, the one that must resume it, is what the quiet table is for)."""
EXACT_TRAVEL = 0.75
"""Of time travel reads, those at a bank write's own commit timestamp (the others at a snapshot
seen earlier): where a visibility bound off by one shows."""


@dataclass
class Account:
    balance: int
    seq: int
    open: bool = True


@dataclass
class Writer:
    """Writes changelog files into each server's inbox; remembers every row it wrote."""

    work: Path
    owners: dict[int, str]
    """account (and register key) -> the server owning its key partition."""
    seed: int
    accounts: dict[int, Account] = field(default_factory=dict)
    registers: dict[int, int] = field(default_factory=dict)
    quiet: dict[int, int] = field(default_factory=dict)
    files: dict[str, tuple[str, list[dict[str, Any]]]] = field(default_factory=dict)
    """file -> (table, rows in the order written)."""
    late: set[str] = field(default_factory=set)
    """Transactions of late records: stored, never visible."""
    owners_of: dict[str, str] = field(default_factory=dict)
    """file -> the server whose inbox it is in."""
    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    _sequence: int = 0
    _steps: int = 0

    def __post_init__(self) -> None:
        self.random = random.Random(self.seed)

    def opening(self) -> None:
        """Every account with the opening balance (one transaction per server), every register
        at 0."""
        by_server: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for account, server in sorted(self.owners.items()):
            self.accounts[account] = Account(OPENING_BALANCE, 1)
            by_server[server].append(
                {"account": account, "balance": OPENING_BALANCE, "txn": f"open-{server}",
                 "seq": 1, "deleted": False}
            )  # fmt: skip
        for server, rows in by_server.items():
            self._drop(BANK, server, rows)
        for key in sorted(self.owners):
            self.registers[key] = 0
            self.quiet[key] = 0
        for server in set(self.owners.values()):
            keys = [k for k, s in self.owners.items() if s == server]
            for table in (REGISTER, QUIET):
                rows = [{"key": k, "value": 0, "seq": 0, "deleted": False} for k in keys]
                self._drop(table, server, rows)

    @property
    def total(self) -> int:
        return OPENING_BALANCE * len(self.owners)

    def step(self) -> bool:
        """One file for one server: a few transfers (a close, a late record now and then) and a
        few register writes. A server with :data:`MAX_BACKLOG` files not yet ingested gets no
        more (it is down or behind); False when every server is."""
        acked = acknowledged(self.work)
        servers = sorted(
            server
            for server in set(self.owners.values())
            if sum(1 for f, s in self.owners_of.items() if s == server and f not in acked)
            < MAX_BACKLOG
        )
        if not servers:
            return False
        server = self.random.choice(servers)
        mine = [a for a, s in self.owners.items() if s == server and self.accounts[a].open]
        rows: list[dict[str, Any]] = []
        for _ in range(self.random.randint(1, 4)):
            if len(mine) < 3:
                break
            source, target = self.random.sample(mine, 2)
            self._sequence += 1
            txn = f"t{self._sequence}"
            if self.random.random() < 0.03:
                rows += self._close(source, target, txn)
                mine.remove(source)
                self.counts["close"] += 1
            else:
                amount = self.random.randint(0, self.accounts[source].balance)
                rows += self._move(source, target, amount, txn)
                self.counts["transfer"] += 1
        if self.random.random() < 0.2 and mine:
            account = self.random.choice(mine)
            self._sequence += 1
            txn = f"late{self._sequence}"
            self.late.add(txn)
            rows.append(
                {"account": account, "balance": 10**9, "txn": txn, "seq": 0, "deleted": False}
            )
            self.counts["late record"] += 1
        if rows:
            self._drop(BANK, server, rows)
        keys = [k for k, s in self.owners.items() if s == server]
        writes = []
        for key in self.random.sample(keys, min(3, len(keys))):
            self.registers[key] += 1
            value = self.registers[key]
            writes.append({"key": key, "value": value, "seq": value, "deleted": False})
        self.counts["register write"] += len(writes)
        self._drop(REGISTER, server, writes)
        self._steps += 1
        if self._steps % QUIET_EVERY == 10:
            key = self.random.choice(keys)
            self.quiet[key] += 1
            value = self.quiet[key]
            self._drop(
                QUIET, server, [{"key": key, "value": value, "seq": value, "deleted": False}]
            )
            self.counts["quiet write"] += 1
        return True

    def _move(self, source: int, target: int, amount: int, txn: str) -> list[dict[str, Any]]:
        rows = []
        for account, delta in ((source, -amount), (target, amount)):
            state = self.accounts[account]
            state.balance += delta
            state.seq += 1
            rows.append({"account": account, "balance": state.balance, "txn": txn,
                         "seq": state.seq, "deleted": False})  # fmt: skip
        return rows

    def _close(self, source: int, target: int, txn: str) -> list[dict[str, Any]]:
        amount = self.accounts[source].balance
        rows = self._move(source, target, amount, txn)
        rows[0]["deleted"] = True
        self.accounts[source].open = False
        return rows

    def _drop(self, table: str, server: str, rows: list[dict[str, Any]]) -> None:
        inbox = self.work / "inbox" / table / server
        inbox.mkdir(parents=True, exist_ok=True)
        self._sequence += 1
        path = inbox / f"{self._sequence:09d}.json"
        staging = inbox / f".{self._sequence:09d}.tmp"
        staging.write_text("".join(json.dumps(row) + "\n" for row in rows))
        staging.rename(path)  # the worker never sees half a file
        self.files[str(path)] = (table, rows)
        self.owners_of[str(path)] = server

    def writes(self) -> list[Write]:
        """Every acknowledged write, with its commit timestamp."""
        found: list[Write] = []
        for ack in _acks(self.work):
            base, started = ack.get("base"), ack.get("started")
            entry = self.files.get(ack["file"])
            if base is None or entry is None:
                continue
            table, rows = entry
            first: dict[str, int] = {}
            for position, row in enumerate(rows):
                if table == BANK:
                    txn = row["txn"]
                    first.setdefault(txn, position)
                    if txn in self.late:
                        continue
                    found.append(Write(BANK, row["account"], txn, base + first[txn],
                                       deleted=row["deleted"], txn=txn, started=started))  # fmt: skip
                else:
                    found.append(
                        Write(table, row["key"], row["value"], base + position, started=started)
                    )
        return found


def acknowledged(work: Path) -> set[str]:
    """The files some server acknowledged."""
    return {ack["file"] for ack in _acks(work)}


def commit_points(work: Path, table: str = BANK) -> list[int]:
    """The first commit timestamp of each acknowledged batch of ``table``, in order."""
    return sorted(a["base"] for a in _acks(work) if a.get("table") == table and a.get("base"))


def _acks(work: Path) -> list[dict[str, Any]]:
    entries = []
    for path in sorted((work / "acks").glob("*.jsonl")):
        entries += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return entries


STATELESS_PAUSE_S = 0.2
"""Between two reads of a stateless reader (cheap ones: it adds a little load)."""


class Readers:
    """Threads querying the broker until stopped; every answer and error is recorded."""

    def __init__(
        self, targets: str | list[str], count: int, seed: int, *, stateless: int = 1
    ) -> None:
        """``targets``: the brokers (a reader's client starts on one and fails over to the next);
        ``stateless`` more readers send no session token (:meth:`_run_stateless`)."""
        self.targets = [targets] if isinstance(targets, str) else list(targets)
        self.count = count
        self.stateless = stateless
        self.seed = seed
        self.reads: list[Read] = []
        self.stop = threading.Event()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self.since = 0
        """The earliest snapshot time travel may pick (every account opened by then)."""
        self.commit_points: Callable[[], list[int]] = list
        """Commit timestamps of bank writes (:func:`commit_points`): change feeds start at them
        and time travel reads at them too, where a bound is exact or off by one."""

    def start(self) -> None:
        runs = [(self._run, n) for n in range(self.count)]
        runs += [(self._run_stateless, n) for n in range(self.stateless)]
        for run, number in runs:
            thread = threading.Thread(target=run, args=(number,), daemon=True)
            thread.start()
            self._threads.append(thread)

    def join(self) -> None:
        self.stop.set()
        for thread in self._threads:
            thread.join(timeout=120)

    def _run(self, number: int) -> None:
        """One reader: one client of every broker (the product's, :func:`connect` with the
        list), starting on broker ``number`` of the list; the client moves to the next broker
        when one goes away, with its session token (monotonic reads across brokers)."""
        chooser = random.Random(self.seed * 1000 + number)
        client_name = f"reader-{number}"
        seen: list[int] = []
        with self._client(number, monotonic=True) as client:
            while not self.stop.is_set():
                kind = chooser.choice(
                    ["lwm", "lwm", "register", "quiet", "both", "pinned", "travel", "self_join",
                     "changes"]
                )  # fmt: skip
                reads = self._query(client, client_name, kind, seen, chooser)
                with self._lock:
                    self.reads.extend(reads)
                read = reads[0]
                if read.ok and read.kind == "lwm" and read.table == BANK and read.snapshot:
                    seen.append(read.snapshot)  # the bank's LWMs only: the tables' differ
                if not read.ok:
                    time.sleep(0.2)

    def _run_stateless(self, number: int) -> None:
        """A caller with no session (a stateless service behind a load balancer): default
        reads of one table each, without a session token, so each answer is at whatever its
        broker serves. Only the broker's served LWM (its floor) keeps them from going back: a
        session token would hide a broker serving below what it served before."""
        chooser = random.Random(self.seed * 1000 + 500 + number)
        name = f"stateless-{number}"
        with self._client(number, monotonic=False) as client:
            while not self.stop.wait(STATELESS_PAUSE_S):
                kind = chooser.choice(["quiet", "register", "lwm"])
                reads = self._query(client, name, kind, [], chooser)
                reads = [replace(read, session=False) for read in reads]
                with self._lock:
                    self.reads.extend(reads)

    def _client(self, number: int, *, monotonic: bool) -> Any:
        """A client of every broker, the list turned to start at broker ``number``."""
        from horizon_broker.client import connect

        first = number % len(self.targets)
        targets = self.targets[first:] + self.targets[:first]
        return connect(targets, timeout=30.0, monotonic=monotonic)

    def _query(
        self, client: Any, name: str, kind: str, seen: list[int], chooser: random.Random
    ) -> list[Read]:
        """One query and what it read: one Read per table it reads (the bank first)."""
        table, sql, window = BANK, BANK_SQL, None
        if kind == "register":
            table, sql, kind = REGISTER, REGISTER_SQL, "lwm"
        elif kind == "quiet":
            table, sql, kind = QUIET, QUIET_SQL, "lwm"
        elif kind == "both":
            sql, kind = BOTH_SQL, "lwm"
        elif kind == "pinned" and seen:
            sql = f"{BANK_SQL} VERSION AS OF {seen[-1]}"
        elif kind == "travel" and seen:
            old = [s for s in seen if s >= self.since] or seen
            old = old[: max(1, len(old) // 2)]
            exact = [point for point in self.commit_points() if old[0] <= point <= seen[-1]]
            if exact and chooser.random() < EXACT_TRAVEL:  # a write's own instant: a boundary
                old = exact
            sql = f"{BANK_SQL} VERSION AS OF {chooser.choice(old)}"
        elif kind == "self_join":
            sql = SELF_JOIN_SQL
        elif kind == "changes" and len(seen) >= 2:
            sql, window = _changes_query(seen, chooser, self.commit_points())
        else:
            kind = "lwm"
        started = time.monotonic()
        broker = client.current
        call = None
        try:
            # Half the reads skip the result cache: a hit is then checked against answers Spark
            # computed (a repeat served only from the cache would prove nothing).
            call = client.start_query(sql, cache=chooser.random() < 0.5)
            broker = call.address
            result = call.result()
            broker = call.address  # the broker that answered (another if the first went away)
        except Exception as error:  # every failure is recorded for the checker
            broker = getattr(call, "address", broker)  # the broker that failed it (the last)
            code = getattr(getattr(error, "code", None), "value", None) or type(error).__name__
            return [Read(name, table, sql, kind, started, time.monotonic(), error=str(code),
                         message=str(error)[:500], window=window, broker=broker)]  # fmt: skip
        ended = time.monotonic()
        per_table = _rows_by_table(sql, table, result.table.to_pylist())
        return [
            Read(name, read_table, sql, kind, started, ended, snapshot=result.snapshot,
                 rows=found, window=window, broker=broker)
            for read_table, found in per_table.items()
        ]  # fmt: skip


def history(writer: Writer, readers: Readers, faults: list[Any]) -> History:
    """What the run recorded. Readers only read at snapshots where every account is open (they
    start once the opening commits are visible), so the bank's total holds at every one."""
    return History(
        writes=writer.writes(),
        reads=list(readers.reads),
        faults=list(faults),
        bank_tables=frozenset({BANK}),
        bank_total=writer.total,
    )


def _changes_query(
    seen: list[int], chooser: random.Random, commits: list[int]
) -> tuple[str, tuple[int, int]]:
    """A change-feed read of the bank between two snapshots already seen, or from a write's
    commit timestamp to the last snapshot seen, and its window."""
    low, high = (
        sorted(chooser.sample(seen[-20:], 2)) if len(set(seen[-20:])) > 1 else (seen[0], seen[-1])
    )
    starts = [point for point in commits if point < seen[-1]][-20:]
    if starts and chooser.random() < 0.5:
        low, high = chooser.choice(starts), seen[-1]
    sql = (
        f"SELECT account, txn, _change_type FROM table_changes('bank', {low}, {high}) "
        "WHERE _change_type IN ('insert', 'update_postimage')"
    )
    return sql, (low, high)


def _rows_by_table(sql: str, table: str, rows: list[dict[str, Any]]) -> dict[str, tuple[Row, ...]]:
    """A read's answer as each table's rows (the query of both tables answers for two)."""
    if sql == BOTH_SQL:
        return {
            BANK: tuple(Row(r["k"], r["v"], r["b"] or 0) for r in rows if r["t"] == BANK),
            QUIET: tuple(Row(r["k"], int(r["v"]), r["b"]) for r in rows if r["t"] == QUIET),
        }
    if table in (REGISTER, QUIET):
        return {table: tuple(Row(r["key"], r["value"], r["value"]) for r in rows)}
    return {table: tuple(Row(r["account"], r["txn"], r.get("balance") or 0) for r in rows)}
