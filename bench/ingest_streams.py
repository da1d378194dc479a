"""``bench.ingest``'s streams part: Debezium events from a Redis stream against Parquet files.

One in-process :class:`~horizon_broker.ingest.server.IngestServer` (on the benchmark's Spark and
redis-server) serves every table, as ``horizon ingest --config`` would:

* **events/s**: batches of ``events`` changes, the first all inserts, then 30% updates of keys
  drawn uniformly from those written so far, the rest new keys. Three ways, each on a fresh table
  with the same batch sizes, timed batch by batch after ``prior`` untimed ones: Parquet changelog
  files (a row per change, what a server usually ingests), the same changes as Debezium envelopes
  in a Redis stream (Debezium Server's Redis sink's ``extended`` entries), and the stream with 10%
  partial events (an ``after`` image of the key and ``status`` only) into a table with a
  ``[partial_upsert]`` section (60% inserts, 30% updates, 10% partial). A batch's clock starts
  once its file is in the directory or its entries are in the stream (``XADD`` is the producer's
  cost) and stops when ``run_source`` returns (committed, announced, updater run).
* **event -> visible**: a serving loop (``IngestServer.serve``, passes every ``watch`` seconds)
  over two tables, one watching a directory of Parquet files and one reading a stream of
  Debezium events (partial table; one event in three an update, one in ten partial), events sent
  one at a time, alternating between the two: from the file's rename or the ``XADD`` until the
  event's own version is the one visible at the served LWM (follower view, Parquet rows,
  visibility rule, as the file latency of ``bench.ingest`` reads it).
"""

from __future__ import annotations

import json
import random
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.report import print_table, summarize

UPDATES, PARTIAL = 0.3, 0.1
STATUSES = ("placed", "paid", "packed", "shipped")


@dataclass(frozen=True, slots=True)
class Change:
    key: int
    lsn: int
    op: str
    """``c`` (a new key), ``u`` (a full image of a key written before), ``p`` (a partial one)."""
    balance: int
    status: str

    def envelope(self) -> str:
        """The Debezium envelope of the change (a partial one's ``after`` holds the key and
        ``status`` only)."""
        after: dict[str, Any] = {"id": self.key, "status": self.status}
        if self.op != "p":
            after["balance"] = self.balance
        return json.dumps({
            "before": None, "after": after, "op": "c" if self.op == "c" else "u",
            "source": {"connector": "postgresql", "db": "bench", "schema": "public",
                       "table": "accounts", "lsn": self.lsn, "txId": self.lsn,
                       "ts_ms": 1_790_000_000_000 + self.lsn},
            "ts_ms": 1_790_000_000_000 + self.lsn, "transaction": None,
        })  # fmt: skip

    def row(self) -> dict[str, Any]:
        return {"id": self.key, "balance": self.balance, "status": self.status,
                "lsn": self.lsn, "deleted": False}  # fmt: skip


def draw(batches: int, events: int, partial: float, seed: int = 3) -> list[list[Change]]:
    """``batches`` batches of ``events`` changes: the first all inserts, then 30% updates and
    ``partial`` partial events of keys written before, the rest new keys (pure, seeded)."""
    rng = random.Random(seed)
    keys, lsn, drawn = 0, 0, []
    for number in range(batches):
        batch = []
        for _ in range(events):
            lsn += 1
            roll = rng.random() if number else 1.0
            op = "u" if roll < UPDATES else "p" if roll < UPDATES + partial else "c"
            if op == "c":
                keys += 1
            key = keys if op == "c" else rng.randint(1, keys)
            batch.append(Change(key, lsn, op, lsn * 7, rng.choice(STATUSES)))
        drawn.append(batch)
    return drawn


def definition(name: str, root: Path, *, debezium: bool, partial: bool) -> Any:
    from horizon_broker.ingest.table import TableDefinition

    data: dict[str, Any] = {
        "name": name,
        "columns": {"id": "bigint", "balance": "bigint", "status": "string", "lsn": "bigint",
                    "deleted": "boolean"},
        "primary_key": ["id"], "comparison": ["lsn"], "delete_column": "deleted",
        "key_partitions": 4, "storage_root": str(root), "granularity": "DAY",
    }  # fmt: skip
    if debezium:
        data["debezium_order"] = "lsn"
    if partial:
        data["partial_upsert"] = {"status": "overwrite", "balance": "overwrite_if_not_null"}
    return TableDefinition.from_dict(data)


class Rig:
    """One ingestion server (in process) on the run's Spark and Redis, and its tables."""

    def __init__(self, spark: Any, redis_url: str, work: Path, prefix: str) -> None:
        import redis

        from horizon_broker.ingest.server import IngestServer

        self.work, self.redis_url, self.prefix = work, redis_url, prefix
        self.redis = redis.Redis.from_url(redis_url)
        self.server = IngestServer(redis_url, f"bench-{prefix}", spark, prefix=prefix)

    def files_table(self, name: str) -> Path:
        from horizon_broker.ingest.server_config import TableSource

        directory = self.work / f"{name}-changelog"
        directory.mkdir(parents=True)
        table = definition(name, self.work / "store", debezium=False, partial=False)
        self.server.add_tables([TableSource(table, source=str(directory), format="parquet")])
        return directory

    def stream_table(self, name: str, *, partial: bool) -> str:
        from horizon_broker.ingest.redis_stream_source import stream_source
        from horizon_broker.ingest.server_config import TableSource

        key = f"{self.prefix}.{name}"
        stream = stream_source(f"{self.redis_url}#{key}", "debezium", max_events=100_000)
        table = definition(name, self.work / "store", debezium=True, partial=partial)
        self.server.add_tables([TableSource(table, format="debezium", stream=stream)])
        return key

    def xadd(self, key: str, changes: list[Change]) -> None:
        pipeline = self.redis.pipeline(transaction=False)
        for change in changes:
            pipeline.xadd(key, {"key": json.dumps({"id": change.key}), "value": change.envelope()})
        pipeline.execute()

    def close(self) -> None:
        self.server.close()
        self.redis.close()


def write_parquet(path: Path, changes: list[Change]) -> None:
    """The changes as one Parquet file, written beside ``path`` and renamed into place."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    temporary = path.with_name(f".{path.name}.tmp")
    pq.write_table(pa.Table.from_pylist([change.row() for change in changes]), temporary)
    temporary.rename(path)


def events_per_second(
    spark: Any, redis_url: str, work: Path, *, events: int, prior: int, measured: int
) -> list[dict[str, Any]]:
    """The three ways side by side (same sizes, one server, fresh tables)."""
    plain = draw(prior + measured, events, 0.0)
    mixed = draw(prior + measured, events, PARTIAL)
    rig = Rig(spark, redis_url, work / "throughput", "ist")
    try:
        directory = rig.files_table("files")
        keys = {name: rig.stream_table(name, partial=name == "partial")
                for name in ("stream", "partial")}  # fmt: skip
        ways = (
            ("Parquet files, 30% updates", "files", plain,
             lambda n, b: write_parquet(directory / f"{n:05d}.parquet", b)),
            ("Debezium in a Redis stream, 30% updates", "stream", plain,
             lambda n, b: rig.xadd(keys["stream"], b)),
            ("Debezium in a Redis stream, 30% updates + 10% partial", "partial", mixed,
             lambda n, b: rig.xadd(keys["partial"], b)),
        )  # fmt: skip
        return [
            timed_batches(rig, label, table, batches, stage, prior)
            for label, table, batches, stage in ways
        ]
    finally:
        rig.close()


def timed_batches(
    rig: Rig, label: str, table: str, batches: list[list[Change]], stage: Any, prior: int
) -> dict[str, Any]:
    seconds = []
    for number, batch in enumerate(batches):
        stage(number, batch)
        started = time.perf_counter()
        result = rig.server.run_source(table)
        elapsed = time.perf_counter() - started
        if result.rows != len(batch):
            raise RuntimeError(f"{table}: batch {number} took {result.rows} of {len(batch)} rows")
        if number >= prior:
            seconds.append(elapsed)
    total, events = sum(seconds), len(batches[0]) * len(seconds)
    return {
        "workload": label, "events_per_batch": len(batches[0]), "prior_batches": prior,
        "measured_batches": len(seconds), "seconds": round(total, 2),
        "events_per_s": round(events / total), "batch_seconds": [round(s, 2) for s in seconds],
    }  # fmt: skip


def event_to_visible(
    spark: Any, redis_url: str, work: Path, *, samples: int, watch_s: float, existing: int
) -> dict[str, dict[str, Any]]:
    """Events one at a time, alternating between a directory and a stream, through one serving
    loop: seconds from landing (rename, ``XADD``) until visible at the LWM."""
    from horizon_broker.watermark.follower import Follower

    rig = Rig(spark, redis_url, work / "latency", "isl")
    directory = rig.files_table("lat_files")
    key = rig.stream_table("lat_stream", partial=True)
    loaded = draw(1, existing, 0.0)[0]  # both tables start with the same keys
    write_parquet(directory / "00000.parquet", loaded)
    rig.xadd(key, loaded)
    rig.server.run_once()
    follower = Follower(redis_url, prefix=rig.prefix)
    follower.start()
    stop = threading.Event()
    loop = threading.Thread(target=rig.server.serve, args=(watch_s, stop), daemon=True)
    loop.start()
    rng = random.Random(5)
    measured: dict[str, list[float]] = {"files": [], "stream": []}
    try:
        for i in range(samples):
            lsn = existing + 1 + i
            roll = i % 10
            op = "p" if roll == 9 else "u" if roll % 3 == 2 else "c"
            change = Change(rng.randint(1, existing) if op != "c" else existing + 1 + i, lsn, op,
                            lsn * 7, rng.choice(STATUSES))  # fmt: skip
            started = time.perf_counter()
            write_parquet(directory / f"{i + 1:05d}.parquet", [dataclass_full(change)])
            measured["files"].append(wait_visible(follower, "lat_files", change, started))
            started = time.perf_counter()
            rig.xadd(key, [change])
            measured["stream"].append(wait_visible(follower, "lat_stream", change, started))
    finally:
        stop.set()
        loop.join(timeout=60)
        follower.stop()
        rig.close()
    return {way: {k: round(v, 3) for k, v in summarize(values).items()} | {
        "each_s": [round(v, 3) for v in values]} for way, values in measured.items()}  # fmt: skip


def dataclass_full(change: Change) -> Change:
    """A file holds whole rows: a partial change is written as a full update there."""
    return change if change.op != "p" else Change(change.key, change.lsn, "u", 0, change.status)


def wait_visible(follower: Any, table: str, change: Change, started: float) -> float:
    deadline = started + 120
    while time.perf_counter() < deadline:
        if visible(follower, table, change.key, change.lsn):
            return time.perf_counter() - started
        time.sleep(0.01)
    raise RuntimeError(f"{table}: change {change} was not visible within 120 s")


def visible(follower: Any, table: str, key: int, lsn: int) -> bool:
    """Whether ``key``'s version of log position ``lsn`` is the one visible at the LWM."""
    import pyarrow.parquet as pq

    try:
        view = follower.view(table)
    except Exception:
        return False
    if view.lwm is None:
        return False
    for segment in view.visible_segments:
        for location in segment.location:
            rows = pq.read_table(
                location.removeprefix("file:"), columns=["id", "lsn", "validFrom", "validUntil"],
                filters=[("id", "=", key)],
            ).to_pylist()  # fmt: skip
            for row in rows:
                if (row["id"] == key and row["lsn"] == lsn and row["validFrom"] <= view.lwm
                        and (row["validUntil"] is None or row["validUntil"] > view.lwm)):  # fmt: skip
                    return True
    return False


def run(spark: Any, redis_url: str, work: Path, *, quick: bool) -> dict[str, Any]:
    """The streams part: both measurements, printed side by side; returns the figures."""
    events, prior, measured = (5_000, 2, 3) if quick else (10_000, 3, 5)
    speed = events_per_second(spark, redis_url, work, events=events, prior=prior,
                              measured=measured)  # fmt: skip
    base = speed[0]["events_per_s"]
    print_table(
        f"ingest from files and from a Redis stream ({events:,} changes a batch, {measured} "
        f"batches timed after {prior})",
        ["workload", "seconds", "events/s", "of the Parquet files'", "batches (s)"],
        [[r["workload"], r["seconds"], r["events_per_s"], f"{r['events_per_s'] / base:.0%}",
          r["batch_seconds"]] for r in speed],
    )  # fmt: skip
    samples = 10 if quick else 40
    delay = event_to_visible(spark, redis_url, work, samples=samples, watch_s=0.1,
                             existing=10_000)  # fmt: skip
    print_table(
        "event landing -> visible at the LWM (seconds; one serving loop, passes every 0.1 s)",
        ["source", "samples", "p50", "p99", "mean", "p50 vs files"],
        [[way, int(r["n"]), r["p50"], r["p99"], r["mean"],
          f"{r['p50'] / delay['files']['p50']:.2f}x"] for way, r in delay.items()],
    )  # fmt: skip
    shutil.rmtree(work / "throughput", ignore_errors=True)
    return {"events_per_s": speed, "event_to_visible_s": delay, "watch_s": 0.1}


def run_part(
    parts: list[str], spark: Any, redis_url: str, work: Path, quick: bool
) -> dict[str, Any]:
    """:func:`run` when ``bench.ingest --parts`` names ``streams`` (else nothing)."""
    return run(spark, redis_url, work, quick=quick) if "streams" in parts else {}


def main(argv: list[str] | None = None) -> None:
    """``python -m bench.ingest_streams [--quick]``: the streams part alone, its figures written
    to ``bench/results/ingest_streams.json`` (``python -m bench.ingest`` runs it with the rest)."""
    import argparse
    import tempfile

    from bench.report import write_results
    from horizon_broker._core.spark_session import INGESTION_CONF, create_spark_session
    from tests.processes import RedisProcess

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes for a short run")
    args = parser.parse_args(argv)
    redis_process = RedisProcess().start()
    spark = create_spark_session(
        master="local[2]",
        app_name="bench-ingest-streams",
        conf={**INGESTION_CONF, "spark.sql.shuffle.partitions": "4"},
    )
    work = Path(tempfile.mkdtemp(prefix="horizon-bench-ingest-streams-"))
    try:
        figures = run(spark, redis_process.url, work, quick=args.quick)
        print(f"wrote {write_results('ingest_streams', {'quick': args.quick, **figures})}")
    finally:
        spark.stop()
        redis_process.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
