"""The checker: every anomaly in a recorded :class:`~chaos.history.History` (pure).

A read at snapshot ``S`` must show, for each key, exactly the newest acknowledged write with
commit timestamp ``<= S`` (none if that write deleted it). Everything else is an anomaly, named
by what went wrong:

* ``duplicate_key``: a key twice in one answer;
* ``bank_total``: a bank table whose balances do not add up to the total the workload conserves;
* ``half_applied_transfer``: one account of a committed transfer shows it, the other does not;
* ``lost_write``: a committed write (acknowledged, so announced) missing from a later read;
* ``future_version``: a version committed after the read's snapshot (visible before the LWM
  covered its commit);
* ``phantom_row``: a key shown although it was deleted, or never written, by the snapshot;
* ``unknown_version``: a version no write produced;
* ``lwm_backwards``: a client's default (LWM) snapshot going down between two of its reads
  (a client sending its session token);
* ``snapshot_below_served``: a default read of one table answered below a snapshot of it the same
  broker already served to another client (its served LWM went down, or it forgot its floor
  when restarted);
* ``unrepeatable_read``: one query at one snapshot answering differently at two times;
* ``commit_below_served``: a write committed at or below a snapshot of its table that a read had
  already been served before the write's batch began (a quiet partition resumed too low: the
  answer at that snapshot would change);
* ``change_feed``: a change feed whose versions are not exactly the writes of its window;
* ``unexpected_error``: an error status the API does not document (INTERNAL, UNKNOWN...), or a
  documented outage status (UNAVAILABLE, DEADLINE_EXCEEDED) while no fault was in force;
* ``segment_id_reused``: one segment id (table, interval, version, partition) committed by two
  servers, or twice by one server with different files (the servers' commit logs at the end of
  the run: store, hold and updater take two such segments for one, and one is lost silently).

>>> from chaos.history import History, Read, Row, Write
>>> history = History(writes=[Write("r", "k", 1, commit_ts=10), Write("r", "k", 2, commit_ts=20)])
>>> history.reads = [Read("c1", "r", "q", "lwm", 0.0, 1.0, snapshot=20, rows=(Row("k", 1),))]
>>> [anomaly.kind for anomaly in check(history)]
['lost_write']
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

from chaos.history import Anomaly, History, Key, LoggedSegment, Read, Row, Version, Write
from horizon_broker.ingest.manifest import ABANDON, COMMIT, INGEST, UPDATE, Record
from horizon_broker.timeline.segment import Segment

DOCUMENTED_ERRORS = frozenset(
    {
        "UNAVAILABLE",
        "DEADLINE_EXCEEDED",
        "FAILED_PRECONDITION",
        "RESOURCE_EXHAUSTED",
        "CANCELLED",
    }
)
OUTAGE_ERRORS = frozenset({"UNAVAILABLE", "DEADLINE_EXCEEDED"})
"""Fine while a fault (or its aftermath, ``settle_s``) is in force; anomalies otherwise."""
SNAPSHOT_KINDS = frozenset({"lwm", "pinned", "travel", "self_join"})


class WriteIndex:
    """The acknowledged writes by key, in commit order, and by version."""

    def __init__(self, writes: Iterable[Write]) -> None:
        self.by_key: dict[tuple[str, Key], list[Write]] = defaultdict(list)
        self.by_version: dict[tuple[str, Key, Version], Write] = {}
        self.by_txn: dict[str, list[Write]] = defaultdict(list)
        for write in sorted(writes, key=lambda w: w.commit_ts):
            self.by_key[(write.table, write.key)].append(write)
            self.by_version[(write.table, write.key, write.version)] = write
            if write.txn is not None:
                self.by_txn[write.txn].append(write)
        self._stamps = {key: [w.commit_ts for w in ws] for key, ws in self.by_key.items()}

    def current(self, table: str, key: Key, snapshot: int) -> Write | None:
        """The newest write of ``key`` committed at or below ``snapshot``."""
        stamps = self._stamps.get((table, key), [])
        index = bisect_right(stamps, snapshot)
        return self.by_key[(table, key)][index - 1] if index else None

    def keys(self, table: str) -> list[Key]:
        return [key for (t, key) in self.by_key if t == table]


def check(history: History, *, settle_s: float = 30.0) -> list[Anomaly]:
    """Every anomaly of ``history``, reads in the order they started."""
    index = WriteIndex(history.writes)
    anomalies: list[Anomaly] = []
    for read in sorted(history.reads, key=lambda r: r.started):
        if not read.ok:
            anomalies += _error(history, read, settle_s)
        elif read.kind == "changes":
            anomalies += _change_feed(index, read)
        elif read.kind in SNAPSHOT_KINDS and read.snapshot is not None:
            anomalies += _duplicates(read)
            anomalies += _versions(index, read)
            if read.table in history.bank_tables:
                anomalies += _bank_total(history, read)
    anomalies += _lwm_backwards(history.reads)
    anomalies += _snapshot_below_served(history.reads)
    anomalies += _unrepeatable(history.reads)
    anomalies += _commit_below_served(history.writes, history.reads)
    anomalies += segment_id_reused(history.commit_logs)
    return anomalies


def count_by_kind(anomalies: Iterable[Anomaly]) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for anomaly in anomalies:
        counts[anomaly.kind] += 1
    return dict(sorted(counts.items()))


# -- one read -------------------------------------------------------------------------------------


def _duplicates(read: Read) -> list[Anomaly]:
    seen: dict[Key, list[Row]] = defaultdict(list)
    for row in read.rows:
        seen[row.key].append(row)
    return [
        Anomaly("duplicate_key", f"key {key!r} appears {len(rows)} times", read, rows)
        for key, rows in seen.items()
        if len(rows) > 1
    ]


def _versions(index: WriteIndex, read: Read) -> list[Anomaly]:
    snapshot = read.snapshot
    assert snapshot is not None
    table = read.table
    found: list[Anomaly] = []
    shown: dict[Key, Write] = {}
    for row in read.rows:
        write = index.by_version.get((table, row.key, row.version))
        if write is None:
            found.append(
                Anomaly("unknown_version", f"key {row.key!r} shows version {row.version!r}, "
                        "which no acknowledged write produced", read, [row])
            )  # fmt: skip
        elif write.commit_ts > snapshot:
            found.append(
                Anomaly("future_version", f"key {row.key!r} shows version {row.version!r} "
                        f"committed at {write.commit_ts}, after the snapshot", read, [row])
            )  # fmt: skip
        else:
            shown[row.key] = write
    shown_keys = {row.key for row in read.rows}
    for key in sorted(set(index.keys(table)) | shown_keys, key=repr):
        expected = index.current(table, key, snapshot)
        got = shown.get(key)
        if key in shown_keys and got is None:
            continue  # reported above
        if expected is None or expected.deleted:
            if got is not None:
                found.append(
                    Anomaly("phantom_row", f"key {key!r} shows version {got.version!r} though "
                            f"it was deleted or not yet written at {snapshot}", read, [got])
                )  # fmt: skip
            continue
        if got is not None and got.commit_ts >= expected.commit_ts:
            continue
        found.append(_missing(index, read, key, expected, got, shown))
    return found


def _missing(
    index: WriteIndex,
    read: Read,
    key: Key,
    expected: Write,
    got: Write | None,
    shown: dict[Key, Write],
) -> Anomaly:
    """A committed write the read does not reflect: half a transfer, or simply lost."""
    has = "nothing" if got is None else f"version {got.version!r} ({got.commit_ts})"
    if expected.txn is not None:
        partners = [
            w for w in index.by_txn[expected.txn] if w.key != key and w.table == expected.table
        ]
        applied = [w for w in partners if w.key in shown and shown[w.key].commit_ts >= w.commit_ts]
        if applied:
            return Anomaly(
                "half_applied_transfer",
                f"transaction {expected.txn} (committed at {expected.commit_ts}) shows on "
                f"{', '.join(repr(w.key) for w in applied)} but key {key!r} shows {has}",
                read,
                [expected, *applied],
            )
    return Anomaly(
        "lost_write",
        f"key {key!r} shows {has}, not version {expected.version!r} committed at "
        f"{expected.commit_ts}",
        read,
        [expected, *([got] if got else [])],
    )


def _bank_total(history: History, read: Read) -> list[Anomaly]:
    total = sum(row.value for row in read.rows)
    if total == history.bank_total:
        return []
    return [Anomaly("bank_total", f"balances add up to {total}, not {history.bank_total}", read)]


def _change_feed(index: WriteIndex, read: Read) -> list[Anomaly]:
    if read.window is None:
        return []
    low, high = read.window
    expected = {
        (w.key, w.version)
        for (table, _), writes in index.by_key.items()
        if table == read.table
        for w in writes
        if low < w.commit_ts <= high and not w.deleted
    }
    got = {(row.key, row.version) for row in read.rows}
    if got == expected:
        return []
    missing, extra = sorted(expected - got, key=repr), sorted(got - expected, key=repr)
    return [
        Anomaly(
            "change_feed",
            f"changes in ({low}, {high}]: {len(missing)} missing {missing[:3]}, "
            f"{len(extra)} unexpected {extra[:3]}",
            read,
        )
    ]


def _error(history: History, read: Read, settle_s: float) -> list[Anomaly]:
    if read.error not in DOCUMENTED_ERRORS:
        return [Anomaly("unexpected_error", f"{read.error}: {read.message}", read)]
    if read.error in OUTAGE_ERRORS and not history.faults_during(
        read.started - settle_s, read.ended
    ):
        detail = f"{read.error} with no fault in force: {read.message}"
        return [Anomaly("unexpected_error", detail, read)]
    return []


# -- across reads ---------------------------------------------------------------------------------


def _lwm_backwards(reads: Iterable[Read]) -> list[Anomaly]:
    """A client's default snapshot is never below one it was served by a read that ended
    before this one started (its session token asks for that; a client without one is only
    owed what its broker served: ``snapshot_below_served``)."""
    per_client: dict[tuple[str, str], list[Read]] = defaultdict(list)
    for read in reads:
        if read.ok and read.session and read.kind == "lwm" and read.snapshot is not None:
            per_client[(read.client, read.table)].append(read)
    return [
        Anomaly("lwm_backwards", f"snapshot {read.snapshot} after {highest.snapshot} for "
                f"client {read.client}", read)
        for same in per_client.values()
        for read, highest in _below_finished(same)
    ]  # fmt: skip


def _snapshot_below_served(reads: Iterable[Read]) -> list[Anomaly]:
    """A default read of one table is never answered below a snapshot of that table served by
    the same broker to any client by a read that ended before it started (a broker's served LWM
    never goes down, across clients and across its restarts: its floor). Brokers follow the
    store apart (one cut off from it serves its last state), so across brokers only a client's
    own reads are ordered (its session token: ``lwm_backwards``); a client without a session
    token is one whose own earlier reads count here too (the served LWM is all that orders
    them, and it is what a session token would hide). Queries of several tables read at their
    lowest LWM and are left out."""
    reads = list(reads)
    tables_read: dict[tuple[str, float, str], int] = defaultdict(int)
    for read in reads:
        tables_read[(read.client, read.started, read.query)] += 1
    per_table: dict[tuple[str, str], list[Read]] = defaultdict(list)
    for read in reads:
        alone = tables_read[(read.client, read.started, read.query)] == 1
        if alone and read.ok and read.kind == "lwm" and read.snapshot is not None:
            per_table[(read.table, read.broker)].append(read)
    return [
        Anomaly("snapshot_below_served", f"snapshot {read.snapshot} after {highest.snapshot} "
                f"was served to {highest.client}", read)
        for same in per_table.values()
        for read, highest in _below_finished(same)
        if highest.client != read.client or not read.session  # with a token: lwm_backwards
    ]  # fmt: skip


def _below_finished(reads: list[Read]) -> list[tuple[Read, Read]]:
    """Each read whose snapshot is below the highest of the reads that ended before it started,
    with that read."""
    found = []
    by_end = sorted(reads, key=lambda r: r.ended)
    finished = 0
    highest: Read | None = None
    for read in sorted(reads, key=lambda r: r.started):
        while finished < len(by_end) and by_end[finished].ended <= read.started:
            done = by_end[finished]
            if highest is None or (done.snapshot or 0) > (highest.snapshot or 0):
                highest = done
            finished += 1
        if highest is not None and (read.snapshot or 0) < (highest.snapshot or 0):
            found.append((read, highest))
    return found


def _unrepeatable(reads: Iterable[Read]) -> list[Anomaly]:
    first: dict[tuple[str, str, int], Read] = {}
    found = []
    for read in sorted(reads, key=lambda r: r.started):
        if not read.ok or read.kind not in SNAPSHOT_KINDS or read.snapshot is None:
            continue
        key = (read.table, read.query, read.snapshot)
        earlier = first.setdefault(key, read)
        if earlier is not read and _canonical(earlier.rows) != _canonical(read.rows):
            found.append(
                Anomaly("unrepeatable_read", f"answered differently at {earlier.started:.3f} "
                        f"and {read.started:.3f}", read)
            )  # fmt: skip
    return found


def _commit_below_served(writes: Iterable[Write], reads: Iterable[Read]) -> list[Anomaly]:
    """Every write whose commit timestamp is at or below a snapshot of its table served by a
    read that ended before the write's batch began (nothing committed later may be visible at a
    snapshot already served: rule 7 of ``docs/design/contract/watermarks.md``)."""
    served: dict[str, tuple[list[float], list[Read]]] = {}
    by_table: dict[str, list[Read]] = defaultdict(list)
    for read in reads:
        if read.ok and read.kind in SNAPSHOT_KINDS and read.snapshot is not None:
            by_table[read.table].append(read)
    for table, table_reads in by_table.items():
        ordered = sorted(table_reads, key=lambda r: r.ended)
        highest: list[Read] = []
        for read in ordered:
            best = highest[-1] if highest else read
            highest.append(read if (read.snapshot or 0) >= (best.snapshot or 0) else best)
        served[table] = ([r.ended for r in ordered], highest)
    found = []
    for write in writes:
        if write.started is None or write.table not in served:
            continue
        ends, highest = served[write.table]
        index = bisect_right(ends, write.started)
        if not index:
            continue
        read = highest[index - 1]
        if (read.snapshot or 0) >= write.commit_ts:
            found.append(
                Anomaly("commit_below_served", f"key {write.key!r} version {write.version!r} "
                        f"committed at {write.commit_ts} by a batch begun after snapshot "
                        f"{read.snapshot} was served", read, [write])
            )  # fmt: skip
    return found


def _canonical(rows: Iterable[Row]) -> list[str]:
    return sorted(repr((row.key, row.version, row.value)) for row in rows)


# -- the servers' commit logs ---------------------------------------------------------------------


def segment_id_reused(logs: Mapping[tuple[str, str], Sequence[Record]]) -> list[Anomaly]:
    """Every segment id that two servers' commit logs name, or that one server's log names twice
    with different files (``logs``: ``(server, table)`` -> its records). A segment's id is all
    the store, a broker's hold and the updater know it by, so two segments under one id are one
    segment to them: one of the two is dropped silently. The same files named twice (a record
    read back again) are one segment."""
    places: dict[tuple[str, str, str, int], list[LoggedSegment]] = defaultdict(list)
    for (server, _table), records in sorted(logs.items()):
        for logged in committed_segments(server, records):
            places[logged.segment].append(logged)
    found = []
    for segment, named in places.items():
        servers = sorted({logged.server for logged in named})
        if len(servers) > 1:
            detail = f"segment {_segment_name(segment)} committed by {' and '.join(servers)}"
        elif len({logged.location for logged in named}) > 1:
            detail = f"segment {_segment_name(segment)} committed twice by {servers[0]}"
        else:
            continue
        found.append(Anomaly("segment_id_reused", detail, None, named))
    return found


def committed_segments(server: str, records: Iterable[Record]) -> list[LoggedSegment]:
    """The segments the committed batches (INGEST) and kept updates (UPDATE additions) of one
    log name; an abandoned update's never counted."""
    commits = [record for record in records if record.phase == COMMIT]
    abandoned = {int(record.body["update"]) for record in commits if record.kind == ABANDON}
    named = []
    for record in sorted(commits, key=lambda r: r.seq):
        if record.kind == INGEST:
            added = record.body.get("segments", ())
        elif record.kind == UPDATE and record.seq not in abandoned:
            added = record.body.get("add", ())
        else:
            continue
        for raw in added:
            segment = Segment.from_dict(raw)
            table, interval, version, partition = segment.id
            named.append(
                LoggedSegment(server, record.seq, record.kind,
                              (table, str(interval), version, partition), segment.location)
            )  # fmt: skip
    return named


def _segment_name(segment: tuple[str, str, str, int]) -> str:
    table, interval, version, partition = segment
    return f"{table} {interval} version {version} partition {partition}"
