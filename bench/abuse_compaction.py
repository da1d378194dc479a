"""Lost replies during a compaction's publish, the compaction kinds of ``python -m bench.abuse``.

An ingestion job in this process (its own local Spark, one core) writes a table ``ledger`` into
the broker's Redis. Each kind ingests a few more batches, then runs a compaction whose state-store
calls go through :class:`chaos.proxy.Proxy` in front of the real redis-server,
losing the reply (the script ran, the compactor sees a dropped connection) at one step. Per kind:
what the compaction said and how long it took, and whether another client's query through the
broker then answers the table's exact contents (every visible segment readable: the old data or
the new, never neither). ``python -m bench.abuse_compaction`` runs these kinds alone against a
broker of its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from chaos.proxy import Proxy, script_sha

SQL = "SELECT count(*) AS n, sum(balance) AS s FROM ledger"

Arm = Callable[[Proxy, Any], None]


def _kinds() -> list[tuple[str, str, Arm, tuple[str, ...]]]:
    """(kind, compaction mode, how the proxy is armed, the expected codes)."""
    from horizon_broker.locks import scripts as lock_scripts
    from horizon_broker.watermark import scripts as store_scripts

    publish, release = script_sha(store_scripts.SEGMENTS), script_sha(lock_scripts.RELEASE)
    return [
        ("compaction: the replace's reply lost on every try", "minor",
         lambda proxy, _preempt: proxy.lose_replies(publish, times=1000), ("PUBLISHED",)),
        ("compaction: retry refused (lock lost) after the replace ran", "minor",
         lambda proxy, preempt: proxy.lose_replies(publish, on_drop=preempt), ("PUBLISHED",)),
        ("compaction: the lock release's reply lost", "minor",
         lambda proxy, _preempt: proxy.lose_replies(release), ("PUBLISHED",)),
        ("major compaction: the announce's reply lost on every try", "major",
         lambda proxy, _preempt: proxy.lose_replies(publish, times=1000), ("PUBLISHED",)),
        # Last: its locks are left to run out (their release could not reach Redis either).
        ("compaction: Redis unreachable once the replace ran", "minor",
         lambda proxy, _preempt: proxy.lose_replies(publish, blackout=True), ("UNAVAILABLE",)),
    ]  # fmt: skip


class Ledger:
    """The table, its ingestion job and the model of what every query must answer."""

    def __init__(self, spark: Any, redis_url: str, root: Path) -> None:
        from horizon_broker.ingest.job import IngestJob
        from horizon_broker.ingest.table import TableDefinition
        from horizon_broker.watermark.server import ServerClient

        self.spark = spark
        self.table = TableDefinition.from_dict(
            {
                "name": "ledger",
                "columns": {"user_id": "string", "balance": "bigint", "seq": "bigint"},
                "primary_key": ["user_id"],
                "comparison": ["seq"],
                "key_partitions": 2,
                "storage_root": str(root),
                "granularity": "DAY",
            }
        )
        self.client = ServerClient(redis_url, "abuse-ingest")
        self.job = IngestJob(spark, self.table, self.client).start()
        self.balances: dict[str, int] = {}
        self.seq = 0

    def batches(self, count: int) -> None:
        for _ in range(count):
            self.seq += 1
            rows = [(f"u{(self.seq * 7 + i) % 40:02d}", self.seq * 100 + i, self.seq)
                    for i in range(12)]  # fmt: skip
            frame = self.spark.createDataFrame(rows, "user_id string, balance bigint, seq bigint")
            self.job.run_batch(frame)
            self.balances.update({user: balance for user, balance, _ in rows})

    @property
    def expected(self) -> tuple[int, int]:
        return len(self.balances), sum(self.balances.values())


def _answers(target: str, token: str, expected: tuple[int, int], timeout: float) -> bool:
    """Whether another client's query answers ``expected`` within ``timeout`` (the broker may
    still be catching up with the last batch)."""
    from horizon_broker.client import connect

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with connect(target, token, timeout=10, monotonic=False) as other:
                row = other.query(SQL, cache=False).to_pylist()[0]
            if (row["n"], row["s"]) == expected:
                return True
        except Exception:  # not answered (yet): what it answers is all we record
            pass
        time.sleep(0.3)
    return False


def compaction_run(
    target: str, token: str, redis: Any, root: Path, outcome: Callable[..., Any]
) -> list[Any]:
    """Every kind against the broker at ``target``; ``outcome(kind, code, seconds,
    next_answered, next_seconds, expected)`` builds what is recorded."""
    from horizon_broker._core.errors import HorizonError
    from horizon_broker._core.spark_session import create_spark_session
    from horizon_broker.compaction.run import Compactor
    from horizon_broker.locks.client import JobLocks, LockClient
    from horizon_broker.locks.rules import BATCH_INGESTION_PRIORITY
    from horizon_broker.watermark.server import ServerClient

    spark = create_spark_session(
        master="local[1]", app_name="horizon-abuse-compaction",
        conf={"spark.sql.shuffle.partitions": "1"},
    )  # fmt: skip
    ledger = Ledger(spark, redis.url, root)
    proxy = Proxy(redis.port)
    outcomes: list[Any] = []
    try:
        for number, (kind, mode, arm, expected) in enumerate(_kinds()):
            try:
                ledger.batches(4)
            except Exception as error:  # a table left broken by an earlier kind
                outcomes.append(outcome(kind, f"ingestion: {type(error).__name__}", 0.0,
                                        False, 0.0, expected))  # fmt: skip
                print(f"  {kind}: ingestion failed first ({error})")
                break
            client = ServerClient(proxy.url, f"abuse-compactor{number}", retry_timeout_s=0.3)
            compactor = Compactor(spark, ledger.table, client)
            chunks = sorted({t.interval for t in compactor.plan()})
            preemptor = JobLocks(
                LockClient(redis.url), "ledger", f"batch-{number}", BATCH_INGESTION_PRIORITY
            )

            def preempt(chunks: Any = chunks, preemptor: Any = preemptor) -> None:
                for chunk in chunks:
                    preemptor.lock_time_chunk(chunk)

            arm(proxy, preempt)
            started = time.perf_counter()
            try:
                report = compactor.compact() if mode == "minor" else compactor.compact_major()
                code = report.outcome.upper()
            except HorizonError as error:
                code = str(error.code)
            seconds = time.perf_counter() - started
            proxy.reachable()
            preemptor.release()
            client.close()
            began = time.perf_counter()
            answered = _answers(target, token, ledger.expected, timeout=60)
            outcomes.append(
                outcome(kind, code, seconds, answered, time.perf_counter() - began, expected)
            )
            print(
                f"  {kind}: {code} in {seconds:.3f}s; the table "
                f"{'answered exactly' if answered else 'NOT answered exactly'}"
            )
    finally:
        proxy.close()
        ledger.client.close()
        spark.stop()
    return outcomes


TOKEN = "abuse-compaction-token"
BROKER_CONFIG = (
    '[spark]\nmaster = "local[1]"\n\n'
    f'[[tokens]]\nname = "reader"\ntoken = "{TOKEN}"\ntables = ["*"]\n'
)


def main() -> int:
    """These kinds alone, against a broker of their own (``bench.abuse`` runs them too)."""
    import tempfile

    from horizon_broker.broker.spark.local_cluster import BrokerProcess
    from horizon_broker.watermark.embedded_redis import EmbeddedRedis

    with tempfile.TemporaryDirectory(prefix="horizon-abuse-compaction-") as tmp:
        work = Path(tmp)
        redis = EmbeddedRedis().start()
        try:
            with BrokerProcess(work, redis.url, BROKER_CONFIG) as broker:
                outcomes = compaction_run(
                    broker.target, TOKEN, redis, work / "data", lambda *fields: fields
                )
        finally:
            redis.close()
    kept = sum(code in expected and answered for _, code, _, answered, _, expected in outcomes)
    print(f"{kept}/{len(outcomes)} as expected")
    return 0 if kept == len(outcomes) else 1


if __name__ == "__main__":
    import sys

    sys.exit(main())
