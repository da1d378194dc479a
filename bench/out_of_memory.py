"""What survives a query that runs the broker's Spark out of memory (issue 45, item 4).

A broker (``horizon serve``, embedded ``local[2]`` Spark with a small heap, its own JVM) serves a
table whose every row holds the same long string (dictionary-encoded: small files, large values
once read), so ``collect_list`` over it outgrows the heap and no estimate before Spark runs sees
it. Per trial: a bystander query starts, the out-of-memory query runs, then follow-up queries.
Recorded per trial: both statuses, whether Spark was restarted (the supervisor's log line), and
whether and how soon a follow-up is answered. Run once with ``[spark] exit_on_oom`` off (the
default) and once on. Not a test: where the error strikes is a race (see ``docs/reference/limits.md``).

``python -m bench.out_of_memory [--trials 3] [--heap 1g]``
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from bench.report import print_table, write_results

LWM = 1200
ROWS = 100_000
VALUE_CHARS = 20_000
OUT_OF_MEMORY = "SELECT size(collect_list(owner)) AS n FROM wide"
BYSTANDER = "SELECT count(DISTINCT sha2(concat(owner, CAST(id AS STRING)), 256)) AS n FROM small"
FOLLOW_UP = "SELECT count(*) AS n FROM wide"


def publish(redis_url: str, root: Path) -> Any:
    from horizon_broker.timeline.interval import Interval
    from horizon_broker.timeline.segment import Segment
    from horizon_broker.watermark.catalog import ColumnSpec, TableDescriptor
    from horizon_broker.watermark.server import ServerClient

    server = ServerClient(redis_url, "oom-server")
    server.register()
    columns = (ColumnSpec("id", "bigint"), ColumnSpec("owner", "string"))
    for name, chars in (("wide", VALUE_CHARS), ("small", 1)):
        table_root = root / name
        server.register_table(
            TableDescriptor(name, columns, primary_key=("id",), storage_root=str(table_root))
        )
        segments = []
        for part in range(2):
            path = table_root / f"p{part}.parquet"
            path.parent.mkdir(parents=True, exist_ok=True)
            rows = ROWS // 2
            owner = pa.DictionaryArray.from_arrays(
                pa.array(np.zeros(rows, dtype=np.int32)), pa.array(["o" * chars])
            )
            pq.write_table(
                pa.table(
                    {
                        "id": pa.array(np.arange(part * rows, (part + 1) * rows)),
                        "owner": owner,
                        "validFrom": pa.array([500] * rows, pa.int64()),
                        "validUntil": pa.nulls(rows, pa.int64()),
                    }
                ),
                path,
            )
            segments.append(
                Segment(
                    table=name,
                    interval=Interval(0, 86_400_000),
                    version="2026-01-01T00:00:00.000Z",
                    partition=part,
                    core_partitions=2,
                    location=(str(path),),
                    row_count=rows,
                )
            )
        server.announce(segments)
        server.report(name, {0: (LWM, LWM), 1: (LWM, LWM)})
    server.start_heartbeats(0.5)
    return server


def _status(call: Any) -> str:
    from horizon_broker._core.errors import HorizonError

    try:
        call()
        return "OK"
    except HorizonError as error:
        return type(error).__name__
    except Exception as error:  # what the client raised is what we record
        return type(error).__name__


def trial(target: str, log: Path) -> dict[str, Any]:
    """One out-of-memory query with a bystander in flight, then follow-ups until one answers."""
    from horizon_broker.client import connect

    restarts_before = log.read_text(errors="replace").count("the Spark engine was restarted")
    with connect(target, timeout=120) as client:
        bystander = client.start_query(BYSTANDER, cache=False)
        oom = _status(lambda: client.query(OUT_OF_MEMORY, cache=False))
        bystander_status = _status(bystander.result)
    started = time.perf_counter()
    follow_ups: list[str] = []
    answered_after = None
    while time.perf_counter() - started < 120:
        with connect(target, timeout=30) as client:
            follow_ups.append(_status(lambda c=client: c.query(FOLLOW_UP, cache=False)))
        if follow_ups[-1] == "OK":
            answered_after = time.perf_counter() - started
            break
        time.sleep(0.5)
    time.sleep(4)  # the supervisor's probe with a job runs after the OOM
    restarted = log.read_text(errors="replace").count("the Spark engine was restarted")
    return {
        "oom_query": oom,
        "bystander": bystander_status,
        "first_follow_up_ok_s": answered_after,
        "follow_ups_failed": len(follow_ups) - (1 if answered_after is not None else 0),
        "spark_restarted": restarted > restarts_before,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--heap", default="1g")
    args = parser.parse_args(argv)
    from horizon_broker.broker.spark.local_cluster import BrokerProcess
    from horizon_broker.watermark.embedded_redis import EmbeddedRedis

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="horizon-oom-") as directory:
        work = Path(directory)
        redis = EmbeddedRedis().start()
        server = publish(redis.url, work / "data")
        try:
            for exit_on_oom in ("false", "true"):
                section = (
                    f'[spark]\nmaster = "local[2]"\ndriver_memory = "{args.heap}"\n'
                    f"exit_on_oom = {exit_on_oom}\nprobe_interval_s = 0.5\nprobe_timeout_s = 5.0\n"
                )
                name = f"exit-{exit_on_oom}"
                broker = BrokerProcess(work, redis.url, section, name=name).start()
                try:
                    for number in range(args.trials):
                        outcome = trial(broker.target, broker.log)
                        rows.append({"exit_on_oom": exit_on_oom, "trial": number, **outcome})
                        print(rows[-1], flush=True)
                finally:
                    broker.stop()
        finally:
            server.close()
            redis.close()
    print_table(
        f"out-of-memory query ({args.heap} heap, local[2])",
        ["exit_on_oom", "OOM query", "bystander", "Spark restarted", "next answer after"],
        [
            (
                row["exit_on_oom"],
                row["oom_query"],
                row["bystander"],
                "yes" if row["spark_restarted"] else "no",
                "-"
                if row["first_follow_up_ok_s"] is None
                else f"{row['first_follow_up_ok_s']:.1f} s",
            )
            for row in rows
        ],
    )
    write_results("out_of_memory", {"heap": args.heap, "trials": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
