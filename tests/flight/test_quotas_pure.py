"""Pure parts of Flight SQL's fair shares: the per-identity and broker-wide bounds of what a
caller keeps open, and a waiting result's batches kept in memory or spilled to a file."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from horizon_broker._core.errors import ResourceExhausted
from horizon_broker.broker.flight.buffered import BufferedResult
from horizon_broker.broker.flight.quotas import OwnerCounts, statement_quota
from horizon_broker.broker.flight.sessions import SessionStore
from horizon_broker.broker.flight.statements import StatementStore


def test_one_identity_stops_at_its_own_quota_and_the_broker_at_its_total():
    counts = OwnerCounts(statement_quota(total=3, per_identity=2))
    counts.add("a")
    counts.add("a")
    with pytest.raises(ResourceExhausted, match=r"token 'a' has 2 .*max_statements_per_identity"):
        counts.add("a")
    counts.add("b")
    with pytest.raises(ResourceExhausted, match=r"3 open prepared statements .*max_statements ="):
        counts.add("c")
    counts.remove("a")
    counts.add("c")


def test_closed_and_expired_entries_give_their_owner_room_again():
    now = [0.0]
    statements = StatementStore(10.0, clock=lambda: now[0], quota=statement_quota(10, 1))
    made = statements.create("a", "SELECT 1", 0, None)
    with pytest.raises(ResourceExhausted):
        statements.check_room("a")
    statements.close(made.handle, "a")
    statements.create("a", "SELECT 1", 0, None)
    now[0] = 11.0
    assert statements.expire() == 1
    statements.check_room("a")
    sessions = SessionStore(10.0, clock=lambda: now[0])
    session = sessions.create("a")
    assert sessions.close(session.id)
    assert not sessions.close(session.id)


def _batch(n: int) -> pa.RecordBatch:
    return pa.record_batch({"x": pa.array(range(n), pa.int64())})


def test_a_waiting_result_spills_past_its_memory_bound_and_reads_back_in_order(tmp_path):
    batches = [_batch(1000), _batch(2000), _batch(3000)]  # 8, 16, 24 kB
    result = BufferedResult.read(batches, memory_bytes=20_000, directory=str(tmp_path))
    assert len(result.memory) == 1 and result.path is not None and os.path.exists(result.path)
    assert result.rows == 6000
    assert [b.num_rows for b in result.batches()] == [1000, 2000, 3000]
    path = result.path
    result.discard()
    assert not os.path.exists(path) and list(result.batches()) == []


def test_a_failed_read_leaves_no_file(tmp_path):
    def failing():
        yield _batch(10_000)
        raise ResourceExhausted("max_result_bytes")

    with pytest.raises(ResourceExhausted):
        BufferedResult.read(failing(), memory_bytes=1, directory=str(tmp_path))
    assert list(tmp_path.iterdir()) == []
