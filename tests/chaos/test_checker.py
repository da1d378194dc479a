"""The checker on hand-made histories: a clean one passes, and each anomaly kind is caught (a
checker that never fires proves nothing)."""

from __future__ import annotations

import doctest

import chaos.checker
from chaos.checker import check, count_by_kind
from chaos.history import Fault, History, Read, Row, Write
from horizon_broker.ingest.manifest import ABANDON, COMMIT, INGEST, UPDATE, Record
from horizon_broker.timeline.interval import Interval
from horizon_broker.timeline.segment import Segment

BANK = "bank"
REGISTER = "register"


def bank_history() -> History:
    """Accounts a and b start with 100 each (at 10); transfer t1 moves 30 from a to b (at 20)."""
    return History(
        writes=[
            Write(BANK, "a", "init", 10, txn="init"),
            Write(BANK, "b", "init", 10, txn="init"),
            Write(BANK, "a", "t1", 20, txn="t1"),
            Write(BANK, "b", "t1", 20, txn="t1"),
        ],
        bank_tables=frozenset({BANK}),
        bank_total=200,
    )


def register_history() -> History:
    """Key k gets 1 (at 10), 2 (at 20), and is deleted (at 30)."""
    return History(
        writes=[
            Write(REGISTER, "k", 1, 10),
            Write(REGISTER, "k", 2, 20),
            Write(REGISTER, "k", "deleted", 30, deleted=True),
        ]
    )


def read(table: str, snapshot: int, *rows: Row, kind: str = "lwm", at: float = 0.0, **more) -> Read:  # type: ignore[no-untyped-def]
    return Read(
        more.pop("client", "c1"),
        table,
        more.pop("query", f"SELECT * FROM {table}"),
        kind,
        at,
        at + 0.5,
        snapshot=snapshot,
        rows=rows,
        **more,
    )


def kinds(history: History) -> dict[str, int]:
    return count_by_kind(check(history))


def test_the_module_docstring_example_holds() -> None:
    outcome = doctest.testmod(chaos.checker)
    assert outcome.attempted > 0 and outcome.failed == 0


def test_a_consistent_history_has_no_anomaly() -> None:
    history = bank_history()
    history.reads = [
        read(BANK, 15, Row("a", "init", 100), Row("b", "init", 100), at=0),
        read(BANK, 25, Row("a", "t1", 70), Row("b", "t1", 130), at=1),
        read(BANK, 25, Row("a", "t1", 70), Row("b", "t1", 130), at=2, kind="self_join"),
        read(BANK, 15, Row("a", "init", 100), Row("b", "init", 100), at=3, kind="pinned"),
        read(BANK, 0, Row("a", "t1"), Row("b", "t1"), kind="changes", window=(15, 25), at=4),
    ]
    assert check(history) == []
    registers = register_history()
    registers.reads = [read(REGISTER, 25, Row("k", 2)), read(REGISTER, 35, at=1)]
    assert check(registers) == []


def test_a_key_twice_in_one_answer_is_caught() -> None:
    history = bank_history()
    history.reads = [read(BANK, 25, Row("a", "t1", 70), Row("a", "init", 100), Row("b", "t1", 130))]
    assert "duplicate_key" in kinds(history)


def test_balances_that_do_not_add_up_are_caught() -> None:
    history = bank_history()
    history.reads = [read(BANK, 25, Row("a", "t1", 70), Row("b", "t1", 100))]
    assert kinds(history) == {"bank_total": 1}


def test_a_transfer_seen_on_one_account_only_is_caught() -> None:
    history = bank_history()
    history.reads = [read(BANK, 25, Row("a", "t1", 70), Row("b", "init", 100))]
    found = check(history)
    assert count_by_kind(found) == {"bank_total": 1, "half_applied_transfer": 1}
    (half,) = [a for a in found if a.kind == "half_applied_transfer"]
    assert "t1" in half.detail and "'b'" in half.detail and half.read is not None


def test_a_committed_write_missing_at_a_later_snapshot_is_caught() -> None:
    history = register_history()
    history.reads = [read(REGISTER, 25, Row("k", 1))]
    assert kinds(history) == {"lost_write": 1}
    history.reads = [read(REGISTER, 25)]  # the key missing altogether
    assert kinds(history) == {"lost_write": 1}


def test_a_version_committed_after_the_snapshot_is_caught() -> None:
    history = register_history()
    history.reads = [read(REGISTER, 15, Row("k", 2))]
    assert kinds(history) == {"future_version": 1}


def test_a_deleted_or_unwritten_key_shown_is_caught() -> None:
    history = register_history()
    history.reads = [read(REGISTER, 35, Row("k", 2))]
    assert kinds(history) == {"phantom_row": 1}


def test_a_version_no_write_produced_is_caught() -> None:
    history = register_history()
    history.reads = [read(REGISTER, 25, Row("k", 99))]
    assert kinds(history) == {"unknown_version": 1}


def test_a_clients_snapshot_going_back_is_caught_but_not_for_overlapping_reads() -> None:
    history = register_history()
    history.reads = [
        read(REGISTER, 25, Row("k", 2), at=0),
        read(REGISTER, 15, Row("k", 1), at=1),  # started after the first ended
    ]
    assert kinds(history) == {"lwm_backwards": 1}
    history.reads = [
        Read("c1", REGISTER, "q", "lwm", 0.0, 2.0, snapshot=25, rows=(Row("k", 2),)),
        Read("c1", REGISTER, "q", "lwm", 1.0, 3.0, snapshot=15, rows=(Row("k", 1),)),
    ]
    assert check(history) == [], "concurrent reads may be served in either order"
    history.reads = [
        read(REGISTER, 25, Row("k", 2), at=0),
        read(REGISTER, 15, Row("k", 1), at=1, client="c2"),
    ]
    assert "lwm_backwards" not in kinds(history), "another client's (see the next test)"


def test_a_default_snapshot_below_one_served_to_another_client_is_caught() -> None:
    """The broker's served LWM never goes down (its floor, across clients and restarts); a
    query of two tables reads at their lowest LWM and is left out."""
    history = register_history()
    history.reads = [
        read(REGISTER, 25, Row("k", 2), at=0),
        read(REGISTER, 15, Row("k", 1), at=1, client="c2"),
    ]
    found = check(history)
    assert count_by_kind(found) == {"snapshot_below_served": 1}
    assert "served to c1" in found[0].detail
    history.reads = [
        Read("c1", REGISTER, "q", "lwm", 0.0, 2.0, snapshot=25, rows=(Row("k", 2),)),
        Read("c2", REGISTER, "q", "lwm", 1.0, 3.0, snapshot=15, rows=(Row("k", 1),)),
    ]
    assert check(history) == [], "concurrent reads may be served in either order"
    both = "SELECT ... FROM register UNION ALL SELECT ... FROM bank"
    history.reads = [
        read(REGISTER, 25, Row("k", 2), at=0),
        read(REGISTER, 15, Row("k", 1), at=1, client="c2", query=both),
        read(BANK, 15, at=1, client="c2", query=both),
    ]
    assert "snapshot_below_served" not in kinds(history), "two tables: their lowest LWM"


def test_a_snapshot_below_one_another_broker_served_is_not_a_regression() -> None:
    """Two brokers follow the store apart (one cut off from it serves its last state): each
    broker's served LWM never goes down, but one may be behind the other for other clients."""
    history = register_history()
    history.reads = [
        read(REGISTER, 25, Row("k", 2), at=0, broker="b1"),
        read(REGISTER, 15, Row("k", 1), at=1, client="c2", broker="b2"),
    ]
    assert "snapshot_below_served" not in kinds(history)
    history.reads.append(read(REGISTER, 15, Row("k", 1), at=2, client="c3", broker="b1"))
    assert kinds(history) == {"snapshot_below_served": 1}, "the same broker went back"


def test_a_client_without_a_session_token_is_owed_only_what_its_broker_served() -> None:
    """A stateless client's own reads are ordered by its broker's served LWM alone: lower on the
    same broker is the broker going back; lower on another broker is not its promise to break."""
    history = register_history()
    history.reads = [
        read(REGISTER, 25, Row("k", 2), at=0, client="s", session=False, broker="b1"),
        read(REGISTER, 15, Row("k", 1), at=1, client="s", session=False, broker="b2"),
    ]
    assert check(history) == [], "no token, two brokers: nothing owed"
    history.reads.append(
        read(REGISTER, 15, Row("k", 1), at=2, client="s", session=False, broker="b1")
    )
    found = check(history)
    assert count_by_kind(found) == {"snapshot_below_served": 1}
    assert "served to s" in found[0].detail


def test_one_query_at_one_snapshot_answering_differently_is_caught() -> None:
    history = bank_history()
    history.reads = [
        read(BANK, 25, Row("a", "t1", 70), Row("b", "t1", 130), at=0, kind="pinned"),
        read(BANK, 25, Row("a", "t1", 60), Row("b", "t1", 140), at=5, kind="pinned"),
    ]
    assert kinds(history) == {"unrepeatable_read": 1}


def test_a_change_feed_missing_a_change_is_caught() -> None:
    history = bank_history()
    history.reads = [read(BANK, 0, Row("a", "t1"), kind="changes", window=(15, 25))]
    assert kinds(history) == {"change_feed": 1}


def test_undocumented_errors_and_outages_without_a_fault_are_caught() -> None:
    history = register_history()
    history.faults = [Fault("redis_pause", 100.0, 110.0)]

    def failed(status: str, at: float) -> Read:
        return Read("c1", REGISTER, "q", "lwm", at, at + 1, error=status, message="boom")

    history.reads = [failed("INTERNAL", 105.0)]
    assert kinds(history) == {"unexpected_error": 1}
    history.reads = [failed("UNAVAILABLE", 105.0), failed("UNAVAILABLE", 120.0)]
    assert check(history) == [], "during the fault and its aftermath"
    history.reads = [failed("UNAVAILABLE", 200.0), failed("DEADLINE_EXCEEDED", 10.0)]
    assert kinds(history) == {"unexpected_error": 2}
    history.reads = [failed("FAILED_PRECONDITION", 10.0)]
    assert check(history) == []


def test_a_write_committed_below_a_snapshot_served_before_its_batch_began_is_caught() -> None:
    """A parked table resumed too low: snapshot 35 was served (the quiet table showed k = 2),
    then a batch began and committed k = 3 at 30, below it: the answer at 35 would change."""
    history = register_history()
    history.writes = [
        Write(REGISTER, "k", 1, 10, started=0.0),
        Write(REGISTER, "k", 2, 20, started=1.0),
        Write(REGISTER, "k", 3, 30, started=6.0),
    ]
    history.reads = [read(REGISTER, 35, Row("k", 2), at=2.0)]
    found = check(history)
    assert count_by_kind(found) == {"commit_below_served": 1, "lost_write": 1}
    assert "committed at 30" in next(a.detail for a in found if a.kind == "commit_below_served")


def test_a_write_whose_batch_began_before_the_read_ended_is_not_below_a_served_snapshot() -> None:
    history = register_history()
    history.writes = [
        Write(REGISTER, "k", 1, 10, started=0.0),
        Write(REGISTER, "k", 2, 20, started=2.2),  # began while the read was running
        Write(REGISTER, "k", 3, 40, started=6.0),  # above the snapshot: fine
    ]
    history.reads = [read(REGISTER, 35, Row("k", 2), at=2.0)]
    assert check(history) == []


def logged(partition: int, location: str, *, kind: str = INGEST, seq: int = 1) -> Record:
    """A commit record of one bank segment (chunk 0, version v1) at ``location``."""
    segment = Segment(
        table=BANK, interval=Interval(0, 3_600_000), version="v1", partition=partition,
        location=(location,),
    ).to_dict()  # fmt: skip
    body = (
        {"kind": kind, "segments": [segment]}
        if kind == INGEST
        else {"kind": kind, "add": [segment]}
    )
    return Record(seq, COMMIT, body)


def test_a_segment_id_committed_by_two_servers_or_twice_with_other_files_is_caught() -> None:
    """The partition number drawn twice across a failover (bench/runs/2026-11-29-chaos-1800-
    anomalies): two servers' segments under one id, which store, hold and updater take for one."""
    clean = {
        ("s1", BANK): [logged(0, "s1/a", seq=1), logged(2, "s1/b", kind=UPDATE, seq=2)],
        ("s2", BANK): [logged(1, "s2/a", seq=1), logged(1, "s2/a", seq=1)],  # read back twice
    }
    assert check(History(commit_logs=clean)) == []
    across = {**clean, ("s2", BANK): [logged(1, "s2/a"), logged(2, "s2/b", seq=2)]}
    (anomaly,) = check(History(commit_logs=across))
    assert anomaly.kind == "segment_id_reused" and "s1 and s2" in anomaly.detail
    assert {row.location for row in anomaly.rows} == {("s1/b",), ("s2/b",)}
    within = {("s1", BANK): [logged(0, "s1/a", seq=1), logged(0, "s1/other", seq=3)]}
    assert kinds(History(commit_logs=within)) == {"segment_id_reused": 1}


def test_an_abandoned_updates_segments_are_not_counted_as_committed() -> None:
    abandoned = [
        logged(0, "s1/a", seq=1),
        logged(0, "s1/rewrite", kind=UPDATE, seq=2),
        Record(3, COMMIT, {"kind": ABANDON, "update": 2}),
    ]
    assert check(History(commit_logs={("s1", BANK): abandoned})) == []
