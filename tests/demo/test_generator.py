"""The demo's changelog generator: repeatable, conserving, partition-local transactions."""

from __future__ import annotations

import itertools

import pyarrow as pa
import pyarrow.compute as pc

from demo.generator import AccountsChangelog, GeneratorConfig

CONFIG = GeneratorConfig(
    accounts=400, transfers_per_batch=300, out_of_order_per_batch=20, closes_per_batch=10, seed=3
)


def partitions() -> list[int]:
    return [account % 4 for account in range(CONFIG.accounts)]


def replay_latest(tables: list[pa.Table]) -> dict[int, tuple[int, bool]]:
    """The newest version per account by seq (what upsert resolution must produce)."""
    latest: dict[int, tuple[int, int, bool]] = {}
    for table in tables:
        for row in table.to_pylist():
            current = latest.get(row["account_id"])
            if current is None or row["seq"] > current[0]:
                latest[row["account_id"]] = (row["seq"], row["balance"], row["deleted"])
    return {account: (balance, deleted) for account, (_, balance, deleted) in latest.items()}


def test_same_seed_gives_the_same_changelog() -> None:
    first = AccountsChangelog(CONFIG, partitions())
    second = AccountsChangelog(CONFIG, partitions())
    assert first.initial_load().equals(second.initial_load())
    for a, b in zip(first.batches(3), second.batches(3), strict=True):
        assert a.equals(b)


def test_replaying_the_changelog_by_seq_conserves_the_total_balance() -> None:
    generator = AccountsChangelog(CONFIG, partitions())
    tables = [generator.initial_load(), *generator.batches(4)]
    latest = replay_latest(tables)
    assert sum(balance for balance, deleted in latest.values() if not deleted) == CONFIG.total
    assert sum(1 for _, deleted in latest.values() if deleted) > 0


def test_every_transaction_stays_inside_one_key_partition() -> None:
    generator = AccountsChangelog(CONFIG, partitions())
    generator.initial_load()
    batch = generator.next_batch()
    by_txn: dict[int, set[int]] = {}
    for row in batch.to_pylist():
        by_txn.setdefault(row["txn"], set()).add(row["account_id"] % 4)
    assert all(len(parts) == 1 for parts in by_txn.values())


def test_batches_contain_out_of_order_records_older_than_the_current_version() -> None:
    generator = AccountsChangelog(CONFIG, partitions())
    generator.initial_load()
    batch = generator.next_batch()
    seqs = batch.column("seq").to_pylist()
    assert any(later < earlier for earlier, later in itertools.pairwise(seqs))
    assert pc.sum(batch.column("deleted").cast(pa.int64())).as_py() > 0
