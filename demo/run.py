"""``horizon demo``: the whole system on embedded defaults, watched through the real gRPC client.

It starts a Redis of its own (free loopback port, stopped on exit), a broker on local Spark and two
ingestion servers for an accounts table, then streams a seeded changelog of transfers, closes
(deletes) and late records through them while one server lags on purpose. Every query goes through
the gRPC client and every answer is checked: the total balance is conserved at every snapshot (the
changelog only moves money), no key has two versions, and once both servers have caught up the
answer equals the generator's own books. The run ends with a summary and exit code 0 only if every
check passed.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from rich.console import Console
from rich.panel import Panel
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from demo.cdc import show_change_data
from demo.console_shot import operate
from demo.generator import AccountsChangelog, GeneratorConfig
from demo.pinot_example import show_pinot_example
from demo.standing import show_key_explained, show_subscriptions
from demo.tour import ACCOUNTS, show_explain, show_flight_sql, show_time_travel, show_timeline
from horizon_broker._core.errors import HorizonError, Internal
from horizon_broker._core.hlc import format_snapshot

if TYPE_CHECKING:
    from horizon_broker.ingest.table import TableDefinition

FAST, SLOW = "server-1", "server-2"
INVARIANT_SQL = (
    "SELECT COUNT(*) AS accounts, SUM(balance) AS total, "
    "COUNT(*) - COUNT(DISTINCT account_id) AS duplicate_keys FROM accounts"
)
CHECKSUM_SQL = "SELECT SUM(balance * (account_id % 9973 + 1)) AS checksum FROM accounts"


@dataclass(frozen=True, slots=True)
class DemoOptions:
    """What ``horizon demo`` runs; the defaults are the full demo on a laptop."""

    seed: int = 7
    accounts: int = 200_000
    batches: int = 4
    transfers_per_batch: int = 20_000
    key_partitions: int = 4
    spark_master: str = "local[*]"
    cluster: bool = False
    """Start a Spark standalone cluster (a master, two workers) and run everything on it."""
    picture: Path | None = None
    workdir: Path | None = None
    keep: bool = False
    """Keep the work directory, and the broker (its console and metrics) up until Ctrl-C."""
    screenshot: bool = True
    """Save the console's timeline page in the work directory when it is kept (needs Chromium
    and selenium)."""
    redis_url: str | None = None
    """Use this Redis instead of starting one (tests share theirs); it should be empty."""

    @classmethod
    def quick(cls, **overrides: Any) -> DemoOptions:
        """A small run (seconds of Spark work per step) for tests and impatient people."""
        values: dict[str, Any] = {
            "accounts": 2_000, "batches": 2, "transfers_per_batch": 300, "screenshot": False,
        }  # fmt: skip
        values.update(overrides)
        return cls(**values)


@dataclass(slots=True)
class Check:
    name: str
    passed: bool
    detail: str


@dataclass(slots=True)
class DemoReport:
    checks: list[Check] = field(default_factory=list)
    lwm_history: list[tuple[str, int]] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(check.passed for check in self.checks)


def run_demo(
    options: DemoOptions, *, console: Console | None = None, spark: Any = None
) -> DemoReport:
    """Run the demo; ``spark`` reuses an existing session (tests), otherwise one is created."""
    console = console or Console()
    logging.getLogger("ingest").setLevel(logging.WARNING)
    with ExitStack() as stack:
        demo = Demo(options, console, stack, spark)
        demo.run()
        return demo.report


class Demo:
    def __init__(self, options: DemoOptions, console: Console, stack: ExitStack, spark: Any):
        self.options = options
        self.console = console
        self.stack = stack
        self.report = DemoReport()
        self.spark = spark
        self.workdir = options.workdir or Path(tempfile.mkdtemp(prefix="horizon-demo-"))
        if not options.keep and options.workdir is None:
            stack.callback(shutil.rmtree, self.workdir, ignore_errors=True)
        self.changelog_dir = self.workdir / "changelog"
        self.storage = self.workdir / "storage"
        self.changelog_dir.mkdir(parents=True, exist_ok=True)

    # -- the story -------------------------------------------------------------------------------

    def run(self) -> None:
        started = time.perf_counter()
        self._title()
        with self.step("Starting Redis, Spark and the broker"):
            self._start_services()
        show_pinot_example(self)
        self._accounts()
        show_time_travel(self)
        show_timeline(self)
        show_explain(self)
        show_flight_sql(self)
        self._compaction()
        show_key_explained(self, show_subscriptions(self))
        show_change_data(self)
        self.report.timings["total_s"] = time.perf_counter() - started
        self._summary()
        if self.broker.console is not None:  # the console's picture; --keep: stay up
            kept = self.options.keep or self.options.workdir is not None  # else removed on exit
            operate(self.console, self.broker, screenshot=self.options.screenshot and kept,
                    keep=self.options.keep, workdir=self.workdir)  # fmt: skip

    def _title(self) -> None:
        self.console.print(
            Panel.fit(
                "[bold]Horizon[/bold]: consistent, versioned reads over upsert tables\n"
                f"seed {self.options.seed}, {self.options.accounts:,} accounts, "
                f"{self.options.batches} batches of changes, "
                f"{self.options.key_partitions} key partitions, two ingestion servers\n"
                f"work directory: {self.workdir}",
                title="horizon demo",
            )
        )

    def _start_services(self) -> None:
        from horizon_broker._core.spark_session import create_spark_session
        from horizon_broker.broker.api.server import BrokerServer
        from horizon_broker.broker.config import config_from_mapping
        from horizon_broker.client import connect
        from horizon_broker.watermark.embedded_redis import EmbeddedRedis

        if self.options.redis_url:
            self.redis_url = self.options.redis_url
        else:
            redis = EmbeddedRedis().start()
            self.stack.callback(redis.close)
            self.redis_url = redis.url
        if self.spark is None:
            master = self.options.spark_master
            if self.options.cluster:
                from horizon_broker.broker.spark.local_cluster import StandaloneCluster

                cluster = StandaloneCluster(workers=2, cores=1, memory="2g")
                self.stack.enter_context(cluster)
                master = cluster.url
                self.console.print(
                    f"[bold]Spark standalone cluster[/bold] {master}: a master and two one-core "
                    "workers on loopback; the ingestion servers and the broker run on it "
                    "(key lookups too: the broker does not read the files itself on a cluster)"
                )
            self.spark = create_spark_session(master=master, app_name="horizon-demo")
            self.stack.callback(self.spark.stop)
        config = config_from_mapping(
            {
                "server": {"listen": "127.0.0.1:0", "grace_s": 1.0},
                "state": {"redis_url": self.redis_url, "heartbeat_timeout_s": 30.0},
            }
        )
        self.broker = BrokerServer(config, spark=self.spark, view_namespace="demo").start()
        self.stack.callback(self._stop_broker)
        self.client = connect(self.broker.target)
        self.stack.callback(self.client.close)
        self.console.print(
            f"  Redis on {self.redis_url}, broker on {self.broker.target} "
            f"(gRPC, health {self.client.health()})"
        )
        if self.broker.observer is not None and self.broker.observer.metrics_url:
            self.console.print(f"  metrics on {self.broker.observer.metrics_url}")
        if self.broker.console is not None:
            self.console.print(f"  web console on {self.broker.console.url}")

    def _stop_broker(self) -> None:
        self.broker.stop(0)
        self.broker.follower.stop()

    # -- 1. the Pinot design's example -----------------------------------------------------------

    # -- 2. accounts under a stream of changes ---------------------------------------------------

    def _accounts_definition(self) -> TableDefinition:
        from horizon_broker.ingest.table import TableDefinition

        return TableDefinition.from_dict(
            {
                "name": ACCOUNTS,
                "columns": {
                    "account_id": "bigint",
                    "owner": "string",
                    "balance": "bigint",
                    "seq": "bigint",
                    "event_time": "timestamp",
                    "deleted": "boolean",
                    "txn": "bigint",
                },
                "primary_key": ["account_id"],
                "comparison": ["seq"],
                "delete_column": "deleted",
                "transaction_column": "txn",
                "time_column": "event_time",
                "granularity": "DAY",
                "key_partitions": self.options.key_partitions,
                "storage_root": str(self.storage),
            }
        )

    def _start_jobs(self, table: TableDefinition) -> None:
        """One ingestion job per server, each owning half of the key partitions."""
        from horizon_broker.ingest.job import IngestJob

        key_partitions = self.options.key_partitions
        half = key_partitions // 2 or 1
        owned = {
            FAST: list(range(half)),
            SLOW: list(range(half, key_partitions)) or [0],
        }
        self.jobs = {
            name: IngestJob(self.spark, table, self.server_client(name), partitions=parts)
            for name, parts in owned.items()
        }
        self.console.print(
            f"  {FAST} owns key partitions {owned[FAST]}, {SLOW} owns {owned[SLOW]}; "
            f"every transfer stays inside one key partition and is one source transaction"
        )

    def _accounts(self) -> None:
        from horizon_broker.ingest.partitioning import partitions_of

        options = self.options
        self.heading(
            "2. Accounts: transfers, closes and late records, one server lagging on purpose"
        )
        table = self._accounts_definition()
        with self.step("Assigning accounts to key partitions"):
            partition_of = partitions_of(
                self.spark,
                [(account,) for account in range(options.accounts)],
                ["account_id"],
                options.key_partitions,
                "account_id bigint",
            )
        self.generator = AccountsChangelog(
            GeneratorConfig(
                accounts=options.accounts,
                transfers_per_batch=options.transfers_per_batch,
                out_of_order_per_batch=max(1, options.transfers_per_batch // 40),
                closes_per_batch=max(1, options.transfers_per_batch // 100),
                seed=options.seed,
            ),
            partition_of,
        )
        self.accounts_table = table
        self._start_jobs(table)
        self.batch_files: list[Path] = []
        self.closes: list[int] = []
        expected_total = self.generator.config.total
        with self._progress() as progress:
            task = progress.add_task("initial load", total=2)
            self._write_batch(0, self.generator.initial_load())
            for name in (FAST, SLOW):
                progress.update(task, description=f"initial load on {name}")
                high = self._ingest(name)
                progress.advance(task)
        # FAST's partitions went idle before SLOW committed: their LWM follows FAST's clock,
        # carried by its heartbeat (once a second), so the table's LWM covers SLOW's load
        # within about a second, not at once. The books are exact from that moment on.
        lwm = self.wait_for_lwm(ACCOUNTS, high)
        self.report.lwm_history.append(("initial load", lwm))
        self._check_books("after the initial load", lwm, expected_total, exact=True)
        for number in range(1, options.batches + 1):
            batch = self.generator.next_batch()
            self.closes.append(int(np.count_nonzero(batch.column("deleted").to_numpy())))
            self._write_batch(number, batch)
            # Both servers are idle (their LWM follows their clocks). SLOW starts reading the
            # batch: its partitions stop following its clock, above anything served.
            began = self.jobs[SLOW].protocol.resume() or lwm
            with self._progress() as progress:
                task = progress.add_task(f"batch {number}: {batch.num_rows:,} changes on {FAST}")
                self._ingest(FAST)
                progress.update(task, completed=1, total=1)
            held = self.lwm()
            marks = self.client.watermarks(ACCOUNTS)
            laggard = marks.laggard.server if marks.HasField("laggard") else "-"
            self.console.print(
                f"  batch {number}: {FAST} is done, {SLOW} is still reading it: "
                f"LWM {format_snapshot(held)} (was {format_snapshot(lwm)}), held back by "
                f"[bold]{laggard}[/bold]"
            )
            self.check(
                f"batch {number}: the laggard holds the LWM back",
                laggard == SLOW and held == began,
                f"LWM stayed at {format_snapshot(held)} where {SLOW} began, laggard {laggard}",
            )
            self._check_books(f"batch {number}, {SLOW} lagging", held, expected_total, exact=False)
            with self._progress() as progress:
                task = progress.add_task(f"batch {number}: {SLOW} catching up")
                high = self._ingest(SLOW)
                progress.update(task, completed=1, total=1)
            lwm_after = self.wait_for_lwm(ACCOUNTS, high)  # FAST is idle: see the initial load
            self.console.print(
                f"  batch {number}: {SLOW} caught up: LWM jumps {format_snapshot(held)} -> "
                f"[bold]{format_snapshot(lwm_after)}[/bold]"
            )
            self.check(
                f"batch {number}: the LWM jumps forward when the laggard catches up",
                lwm_after > held,
                f"{format_snapshot(held)} -> {format_snapshot(lwm_after)}",
            )
            self.report.lwm_history.append((f"after batch {number}", lwm_after))
            self._check_books(f"after batch {number}", lwm_after, expected_total, exact=True)
            lwm = lwm_after
        self._print_lwm_history()

    def _write_batch(self, number: int, batch: pa.Table) -> None:
        path = self.changelog_dir / f"batch-{number:04d}.parquet"
        pq.write_table(batch, path)
        self.batch_files.append(path)

    def _ingest(self, server: str) -> int:
        """Ingest the changelog's new files on ``server``; returns its batch's last commit."""
        job = self.jobs[server]
        result = job.run_directory(str(self.changelog_dir), "parquet")
        self.wait_for_progress(ACCOUNTS, server, result.high)
        return result.high

    def _check_books(self, label: str, lwm: int, expected_total: int, *, exact: bool) -> None:
        result = self.client.execute(INVARIANT_SQL)
        row = result.table.to_pylist()[0]
        snapshot = result.snapshot
        # Idle servers' LWM follows their clocks: the query reads at the LWM of its moment.
        ok = row["total"] == expected_total and row["duplicate_keys"] == 0 and snapshot >= lwm
        detail = (
            f"snapshot {format_snapshot(snapshot)}: {row['accounts']:,} accounts, total {row['total']:,} "
            f"(expected {expected_total:,}), {row['duplicate_keys']} keys with two versions"
        )
        self.console.print(("  [green]✓[/green] " if ok else "  [red]✗[/red] ") + detail)
        self.check(f"invariant {label}", ok, detail)
        if exact:
            balances = self.generator.balances
            weights = np.arange(len(balances), dtype=np.int64) % 9973 + 1
            expected = int((balances * weights).sum())
            got = self.scalar(CHECKSUM_SQL)
            count_ok = row["accounts"] == self.generator.open_accounts
            self.check(
                f"exact books {label}",
                got == expected and count_ok,
                f"checksum {got} vs generator {expected}; {row['accounts']:,} accounts vs "
                f"{self.generator.open_accounts:,} open",
            )

    def _print_lwm_history(self) -> None:
        view = Table("moment", "low-watermark", "as an integer (SQL's VERSION AS OF)")
        for label, lwm in self.report.lwm_history:
            view.add_row(label, format_snapshot(lwm), str(lwm))
        self.console.print(view)

    # -- 3. time travel and the change feed ------------------------------------------------------

    # -- 7. compaction while queries run ---------------------------------------------------------

    def _compaction(self) -> None:
        from demo.compaction import compaction_while_querying

        self.heading("7. Compaction while queries run")
        snapshots = [self.lwm()]
        if len(self.report.lwm_history) > 1:
            snapshots.append(self.report.lwm_history[1][1])
        compaction_while_querying(
            spark=self.spark,
            client=self.client,
            redis_url=self.redis_url,
            table=self.accounts_table,
            snapshots=snapshots,
            console=self.console,
            check=self.check,
            picture=self.workdir / "accounts-compacted.svg",
        )

    # -- helpers ---------------------------------------------------------------------------------

    def _summary(self) -> None:
        view = Table("check", "result", "detail", title="Summary")
        for check in self.report.checks:
            view.add_row(
                check.name,
                "[green]pass[/green]" if check.passed else "[red]FAIL[/red]",
                check.detail,
            )
        self.console.print(view)
        passed = sum(check.passed for check in self.report.checks)
        colour = "green" if self.report.passed else "red"
        self.console.print(
            f"[bold {colour}]{passed}/{len(self.report.checks)} checks passed[/bold {colour}] "
            f"in {self.report.timings['total_s']:.0f} s"
        )

    def server_client(self, name: str) -> Any:
        from horizon_broker.watermark.server import ServerClient

        client = ServerClient(self.redis_url, name)
        client.register()
        client.start_heartbeats(1.0)
        self.stack.callback(client.close)
        self.stack.callback(client.stop_heartbeats)
        return client

    def wait_for_progress(self, table: str, server: str, high: int, timeout: float = 30.0) -> None:
        """Wait until the broker has seen ``server`` report ``high`` on every partition it owns."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            marks = self.client.watermarks(table)
            rows = [row for row in marks.partitions if row.server == server]
            if rows and all(min(row.ingested, row.applied) >= high for row in rows):
                return
            time.sleep(0.05)
        raise Internal(f"the broker did not see {server}'s progress on {table} within {timeout}s")

    def wait_for_lwm(self, table: str, at_least: int, timeout: float = 30.0) -> int:
        """Wait until the broker serves ``table`` at ``at_least`` or above; returns its LWM."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            marks = self.client.watermarks(table)
            if marks.HasField("lwm") and marks.lwm >= at_least:
                return int(marks.lwm)
            time.sleep(0.05)
        raise Internal(f"the broker's LWM of {table} did not reach {at_least} within {timeout}s")

    def lwm(self) -> int:
        marks = self.client.watermarks(ACCOUNTS)
        if not marks.HasField("lwm"):
            raise Internal("the accounts table has no low-watermark")
        return marks.lwm

    def scalar(self, sql: str) -> Any:
        table = self.client.query(sql)
        return table.column(0)[0].as_py()

    def check(self, name: str, passed: bool, detail: str) -> None:
        self.report.checks.append(Check(name, bool(passed), detail))

    def heading(self, text: str) -> None:
        self.console.rule(f"[bold]{text}")

    @contextmanager
    def step(self, text: str) -> Iterator[None]:
        with self.console.status(text):
            started = time.perf_counter()
            yield
        self.console.print(f"[green]✓[/green] {text} ({time.perf_counter() - started:.1f} s)")

    def _progress(self) -> Progress:
        return Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            TimeElapsedColumn(),
            console=self.console,
            transient=False,
        )


def main(argv_options: DemoOptions, console: Console | None = None) -> int:
    """Run the demo for the CLI: a clean message instead of a stack trace, and the exit code."""
    console = console or Console()
    try:
        report = run_demo(argv_options, console=console)
    except HorizonError as error:
        console.print(f"[red]horizon demo failed:[/red] {error}")
        return 1
    except KeyboardInterrupt:
        console.print("[yellow]interrupted[/yellow]")
        return 130
    return 0 if report.passed else 1
