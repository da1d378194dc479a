"""A repeatable changelog of bank accounts whose total balance is conserved.

Why this data: it exercises everything an upsert table sees in production (inserts, updates,
out-of-order records, deletes, several key partitions) while carrying an invariant a reader can check
at every snapshot: money only moves between accounts, so the sum of all visible balances never
changes. Each transfer (and each close, which moves the whole balance to another account before the
delete) is one source transaction whose changes share a ``txn`` id and stay inside one key
partition, so one ingestion server commits it atomically at a single commit timestamp.

Everything is derived from the seed: the same seed gives the same changelog.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

CHANGELOG_SCHEMA = pa.schema(
    [
        ("account_id", pa.int64()),
        ("owner", pa.string()),
        ("balance", pa.int64()),
        ("seq", pa.int64()),
        ("event_time", pa.timestamp("ms", tz="UTC")),
        ("deleted", pa.bool_()),
        ("txn", pa.int64()),
    ]
)
DAY_MS = 86_400_000
EPOCH_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z: the first batch's day


@dataclass(frozen=True, slots=True)
class GeneratorConfig:
    """How much data the demo makes; the defaults are the demo's, tests use smaller ones."""

    accounts: int = 200_000
    initial_balance: int = 1_000
    transfers_per_batch: int = 20_000
    out_of_order_per_batch: int = 500
    closes_per_batch: int = 200
    seed: int = 7

    @property
    def total(self) -> int:
        return self.accounts * self.initial_balance


class AccountsChangelog:
    """Generates the initial load and then one batch of changes at a time."""

    def __init__(self, config: GeneratorConfig, partition_of_account: Sequence[int]) -> None:
        if len(partition_of_account) != config.accounts:
            raise ValueError("partition_of_account needs one key partition per account")
        self.config = config
        self._rng = np.random.default_rng(config.seed)
        self._balance = np.full(config.accounts, config.initial_balance, dtype=np.int64)
        self._last_seq = np.zeros(config.accounts, dtype=np.int64)
        self._open = np.ones(config.accounts, dtype=bool)
        self._partition = np.asarray(partition_of_account, dtype=np.int64)
        self._members = {
            int(p): np.flatnonzero(self._partition == p) for p in np.unique(self._partition)
        }
        self._seq = 0
        self._txn = 0
        self._batch = 0

    @property
    def balances(self) -> np.ndarray:
        """The balances after every batch generated so far (closed accounts hold 0)."""
        return self._balance.copy()

    @property
    def open_accounts(self) -> int:
        return int(self._open.sum())

    def initial_load(self) -> pa.Table:
        """Every account opened with the initial balance, one transaction per account."""
        n = self.config.accounts
        ids = np.arange(n, dtype=np.int64)
        seqs = self._next_seqs(n)
        self._last_seq[:] = seqs
        txns = self._next_txns(n)
        return self._table(ids, self._balance.copy(), seqs, np.zeros(n, dtype=bool), txns)

    def batches(self, count: int) -> Iterator[pa.Table]:
        for _ in range(count):
            yield self.next_batch()

    def next_batch(self) -> pa.Table:
        """Transfers, closes and stale (out-of-order) records, in source order."""
        self._batch += 1
        rows: list[tuple[int, int, int, bool, int]] = []  # account, balance, seq, deleted, txn
        for _ in range(self.config.transfers_per_batch):
            self._transfer(rows)
        for _ in range(self.config.closes_per_batch):
            self._close(rows)
        stale = self._stale_records(self.config.out_of_order_per_batch)
        order = self._rng.permutation(len(stale)) if stale else []
        merged = rows + [stale[i] for i in order]
        if not merged:
            return CHANGELOG_SCHEMA.empty_table()
        accounts, balances, seqs, deleted, txns = (
            np.array(col) for col in zip(*merged, strict=True)
        )
        return self._table(accounts, balances, seqs, deleted.astype(bool), txns)

    def _transfer(self, rows: list[tuple[int, int, int, bool, int]]) -> None:
        pair = self._pick_pair()
        if pair is None:
            return
        source, target = pair
        if self._balance[source] == 0:
            return
        amount = int(self._rng.integers(1, self._balance[source] + 1))
        self._balance[source] -= amount
        self._balance[target] += amount
        txn = self._next_txns(1)[0]
        for account in (source, target):
            seq = self._next_seqs(1)[0]
            self._last_seq[account] = seq
            rows.append((account, int(self._balance[account]), seq, False, txn))

    def _close(self, rows: list[tuple[int, int, int, bool, int]]) -> None:
        pair = self._pick_pair()
        if pair is None:
            return
        closing, heir = pair
        txn = self._next_txns(1)[0]
        self._balance[heir] += self._balance[closing]
        self._balance[closing] = 0
        self._open[closing] = False
        for account, deleted in ((heir, False), (closing, True)):
            seq = self._next_seqs(1)[0]
            self._last_seq[account] = seq
            rows.append((account, int(self._balance[account]), seq, deleted, txn))

    def _stale_records(self, count: int) -> list[tuple[int, int, int, bool, int]]:
        """Records that arrive late: their seq is older than the account's current version."""
        candidates = np.flatnonzero(self._open & (self._last_seq > 1))
        if len(candidates) == 0 or count == 0:
            return []
        chosen = self._rng.choice(candidates, size=min(count, len(candidates)), replace=False)
        stale = []
        for account in chosen:
            seq = int(self._rng.integers(1, self._last_seq[account]))
            bogus = int(self._rng.integers(0, 10 * self.config.initial_balance))
            stale.append((int(account), bogus, seq, False, self._next_txns(1)[0]))
        return stale

    def _pick_pair(self) -> tuple[int, int] | None:
        partitions = list(self._members)
        for _ in range(8):
            partition = partitions[int(self._rng.integers(0, len(partitions)))]
            members = self._members[partition]
            a, b = (int(x) for x in members[self._rng.integers(0, len(members), size=2)])
            if a != b and self._open[a] and self._open[b]:
                return a, b
        return None

    def _next_seqs(self, count: int) -> np.ndarray:
        start = self._seq + 1
        self._seq += count
        return np.arange(start, start + count, dtype=np.int64)

    def _next_txns(self, count: int) -> np.ndarray:
        start = self._txn + 1
        self._txn += count
        return np.arange(start, start + count, dtype=np.int64)

    def _table(
        self,
        accounts: np.ndarray,
        balances: np.ndarray,
        seqs: np.ndarray,
        deleted: np.ndarray,
        txns: np.ndarray,
    ) -> pa.Table:
        day = EPOCH_MS + self._batch * DAY_MS
        offsets = self._rng.integers(0, DAY_MS, size=len(accounts))
        return pa.table(
            {
                "account_id": pa.array(accounts, pa.int64()),
                "owner": pa.array([f"owner-{a % 9973}" for a in accounts.tolist()]),
                "balance": pa.array(balances, pa.int64()),
                "seq": pa.array(seqs, pa.int64()),
                "event_time": pa.array(day + offsets, pa.timestamp("ms", tz="UTC")),
                "deleted": pa.array(deleted, pa.bool_()),
                "txn": pa.array(txns, pa.int64()),
            },
            schema=CHANGELOG_SCHEMA,
        )
