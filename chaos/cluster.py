"""The processes a fault-injection run drives, each a real OS process it can kill, pause and
restart: a Redis Sentinel group (:mod:`chaos.sentinel_group`: a primary, a replica, three
sentinels), two brokers (``horizon serve``), ingestion servers (:mod:`chaos.worker`, on a clock
the run can skew) and compaction runs (``horizon compact``), with segment storage on a
size-limited filesystem."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from horizon_broker.watermark.embedded_redis import free_port

BANK = "bank"
REGISTER = "register"
QUIET = "quiet"
"""A table written a few times and then left alone for long stretches: its partitions are idle
(their LWM follows the servers' heartbeats) or parked, and must never hold the others back."""
TABLES = (BANK, REGISTER, QUIET)
KEY_PARTITIONS = 2


def table_definitions(storage: Path) -> dict[str, dict[str, Any]]:
    """The tables of the workload, as ``TableDefinition.from_dict`` takes them."""
    common = {
        "comparison": ["seq"],
        "delete_column": "deleted",
        "key_partitions": KEY_PARTITIONS,
        "storage_root": str(storage),
        "checkpoint_interval": 1_000_000,  # the run reads every commit record back
        "gc_grace": "10m",
    }
    return {
        BANK: {
            "name": BANK,
            "columns": {
                "account": "bigint",
                "balance": "bigint",
                "txn": "string",
                "seq": "bigint",
                "deleted": "boolean",
            },
            "primary_key": ["account"],
            "transaction_column": "txn",
            **common,
        },
        REGISTER: {
            "name": REGISTER,
            "columns": {"key": "bigint", "value": "bigint", "seq": "bigint", "deleted": "boolean"},
            "primary_key": ["key"],
            **common,
        },
        QUIET: {
            "name": QUIET,
            "columns": {"key": "bigint", "value": "bigint", "seq": "bigint", "deleted": "boolean"},
            "primary_key": ["key"],
            **common,
            # Its rare batches run on Spark, the path of large batches (the others are small
            # enough for the driver): seconds between taking commit timestamps and announcing.
            "driver_batch_rows": 0,
            "driver_columnar_rows": 0,
        },
    }


def toml_text(definition: dict[str, Any]) -> str:
    """A table definition as TOML (flat values and the ``[columns]`` table only)."""
    lines = []
    for name, value in definition.items():
        if name != "columns":
            lines.append(f"{name} = {json.dumps(value)}")
    lines.append("[columns]")
    lines += [f"{name} = {json.dumps(kind)}" for name, kind in definition["columns"].items()]
    return "\n".join(lines) + "\n"


def read_commit_logs(
    storage: Path, servers: list[str], tables: tuple[str, ...]
) -> dict[tuple[str, str], list[Any]]:
    """``(server, table)`` -> the records of that server's commit log of that table (the newest
    checkpoint and what follows it: the run's tables keep every record, see
    ``checkpoint_interval``), read from local storage directly (no Spark), for the end-of-run
    checks."""
    from horizon_broker.ingest.manifest import Record, live_names, manifest_dir, parse_name

    logs: dict[tuple[str, str], list[Any]] = {}
    for table in tables:
        for server in servers:
            directory = Path(manifest_dir(str(storage / table), server))
            names = {}
            for path in directory.glob("*.json"):
                parsed = parse_name(path.name)
                if parsed is not None:
                    names[parsed] = path
            logs[(server, table)] = [
                Record(seq, phase, json.loads(names[(seq, phase)].read_text()))
                for seq, phase in live_names(names)
            ]
    return logs


@dataclass
class Process:
    """One child process, started again with the same command after a kill."""

    name: str
    command: list[str]
    log: Path
    env: dict[str, str] = field(default_factory=dict)
    popen: subprocess.Popen[bytes] | None = None
    paused: bool = False
    started_at: int = 0
    """Where this start's output begins in the log."""

    def start(self) -> None:
        handle = self.log.open("ab")
        self.started_at = handle.tell()
        self.popen = subprocess.Popen(
            self.command,
            stdout=handle,
            stderr=subprocess.STDOUT,
            env={**os.environ, **self.env},
            start_new_session=True,
        )
        handle.close()

    def wait_ready(self, *markers: str, timeout: float = 300.0) -> bool:
        """Wait until this start's output holds one of ``markers``; False when the process died
        or the time ran out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.log.open("rb") as handle:
                handle.seek(self.started_at)
                output = handle.read()
            if any(marker.encode() in output for marker in markers):
                return True
            if not self.alive:
                return False
            time.sleep(0.2)
        return False

    @property
    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def kill(self) -> None:
        """SIGKILL the process and everything it started (its Spark JVM)."""
        if self.popen is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait(timeout=30)
        self.popen = None
        self.paused = False

    def pause(self) -> None:
        if self.popen is not None:
            os.killpg(self.popen.pid, signal.SIGSTOP)
            self.paused = True

    def resume(self) -> None:
        if self.popen is not None and self.paused:
            os.killpg(self.popen.pid, signal.SIGCONT)
            self.paused = False

    def stop(self, timeout: float = 20.0) -> int | None:
        """Ask politely (SIGTERM to the process alone, not its Spark JVM: an ingestion server
        finishes its batch and parks), then kill; returns the exit code when it exited by
        itself."""
        if self.popen is None:
            return None
        self.resume()
        code = None
        try:
            os.kill(self.popen.pid, signal.SIGTERM)
            code = self.popen.wait(timeout=timeout)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
        self.kill()
        return code


BROKERS = ("broker-1", "broker-2")
HEARTBEAT_TIMEOUT_S = 5.0
STORAGE_BYTES = 256 * 1024 * 1024
"""The size-limited filesystem under segment storage (a tmpfs the run mounts): a full disk is
real ENOSPC."""


def _broker_config(port: int, url: str, recheck_s: float) -> str:
    return (
        "[server]\n"
        f'listen = "127.0.0.1:{port}"\n'
        "grace_s = 1.0\n"
        "[state]\n"
        f'redis_url = "{url}"\n'
        f"heartbeat_timeout_s = {HEARTBEAT_TIMEOUT_S}\n"
        "max_staleness_s = 30.0\n"
        f"unreadable_recheck_s = {recheck_s}\n"
        "[spark]\n"
        'master = "local[2]"\n'
        "[limits]\n"
        "max_concurrent = 4\n"
        "queue_size = 32\n"
        "query_timeout_s = 60.0\n"
        "[flight]\n"
        'listen = "127.0.0.1:0"\n'  # never the fixed defaults: runs share this machine
        "[metrics]\n"
        'listen = "127.0.0.1:0"\n'
        "[console]\n"
        'listen = "127.0.0.1:0"\n'
    )


class Cluster:
    """The Sentinel group, two brokers and the ingestion servers of one run, in ``work``. Each
    broker and each server reaches the store through its own :class:`~chaos.proxy.Link` (a
    partition cuts it off alone); the compactor asks the sentinels directly."""

    def __init__(
        self,
        work: Path,
        servers: dict[str, list[int]],
        *,
        recheck_s: float = 2.0,
        mutation: str | None = None,
        brokers: int = len(BROKERS),
    ):
        """``mutation`` (:mod:`chaos.mutations`) is planted in the processes it names;
        ``brokers``: two, or one (a short mutated run without faults)."""
        from chaos.proxy import Link
        from chaos.sentinel_group import MASTER, SentinelGroup
        from chaos.skewed import skewed_command

        self.work = work
        self.storage = work / "storage"
        self.logs = work / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.group = SentinelGroup()
        self.links = {
            name: Link(name, self.group.sentinel_ports, self.group.data_ports)
            for name in (*BROKERS[:brokers], *servers)
        }
        self.disk_limited: str | None = None
        """Why the storage has no size limit (the full-disk fault cannot run), or None."""
        self.definitions = table_definitions(self.storage)
        for name, definition in self.definitions.items():
            (work / f"{name}.json").write_text(json.dumps(definition))
            (work / f"{name}.toml").write_text(toml_text(definition))
        horizon = str(Path(sys.executable).with_name("horizon"))
        self.ports = {name: free_port() for name in BROKERS[:brokers]}
        self.brokers: dict[str, Process] = {}
        for name, port in self.ports.items():
            config = work / f"{name}.toml"
            config.write_text(_broker_config(port, self.links[name].url(MASTER), recheck_s))
            self.brokers[name] = Process(
                name, [horizon, "serve", "--config", str(config)], self.logs / f"{name}.log"
            )
        self.skews = {name: work / "skew" / name for name in servers}
        (work / "skew").mkdir(exist_ok=True)
        self.servers = {
            name: Process(
                name,
                skewed_command(self.skews[name], [
                    sys.executable, "-m", "chaos.worker", "--work", str(work), "--server-id",
                    name, "--redis", self.links[name].url(MASTER), "--partitions",
                    ",".join(str(p) for p in partitions),
                ]),
                self.logs / f"{name}.log",
            )
            for name, partitions in servers.items()
        }  # fmt: skip
        self.compactor = Process(
            "compactor",
            [horizon, "compact", "--table", str(work / f"{BANK}.toml"), "--redis",
             self.group.url, "--spark-master", "local[1]"],
            self.logs / "compactor.log",
        )  # fmt: skip
        self.compaction_pass = Process(
            "compaction-pass", self.compactor.command, self.logs / "compaction-pass.log"
        )
        """One compaction pass run to its end (mutated runs: a compaction that completes)."""
        if mutation is not None:
            self._plant(mutation)

    def _plant(self, names: str) -> None:
        """Start the processes each mutation of ``names`` (``A`` or ``A+B``) names through
        :mod:`chaos.mutant`."""
        from chaos.mutant import mutated_command
        from chaos.mutations import BROKER, COMPACTOR, SERVER, mutations

        for planted in mutations(names):
            targets = {
                BROKER: list(self.brokers.values()),
                SERVER: list(self.servers.values()),
                COMPACTOR: [self.compactor, self.compaction_pass],
            }[planted.process]
            for process in targets:
                process.command = mutated_command(planted.name, process.command)

    @property
    def broker(self) -> Process:
        """The first broker (the one a single-target client talks to)."""
        return self.brokers[BROKERS[0]]

    @property
    def target(self) -> str:
        return self.targets[0]

    @property
    def targets(self) -> list[str]:
        return [f"127.0.0.1:{port}" for port in self.ports.values()]

    def start(self) -> None:
        self.group.start()
        self._limit_storage()
        for server in self.servers.values():
            server.start()
        for broker in self.brokers.values():
            broker.start()

    def _limit_storage(self) -> None:
        """Mount a size-limited tmpfs under segment storage (root only); when that is not
        permitted, note why: the full-disk fault then reports itself not runnable."""
        self.storage.mkdir(parents=True, exist_ok=True)
        command = [
            "mount",
            "-t",
            "tmpfs",
            "-o",
            f"size={STORAGE_BYTES}",
            "tmpfs",
            str(self.storage),
        ]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)
        except (OSError, subprocess.TimeoutExpired) as error:
            self.disk_limited = f"mount: {error}"
            return
        if done.returncode != 0:
            self.disk_limited = f"mount: {(done.stderr or done.stdout).strip()[:200]}"

    def stop(self) -> None:
        """Every process asked to stop at once (each parks or drains on its own), then the
        store and the storage."""
        processes = [
            self.compactor, self.compaction_pass, *self.brokers.values(), *self.servers.values()
        ]  # fmt: skip
        stopping = [threading.Thread(target=process.stop) for process in processes]
        for thread in stopping:
            thread.start()
        for thread in stopping:
            thread.join()
        for link in self.links.values():
            link.close()
        self.group.close()
        if self.disk_limited is None:
            subprocess.run(["umount", "-l", str(self.storage)], capture_output=True, check=False)

    def commit_logs(self) -> dict[tuple[str, str], list[Any]]:
        """The servers' commit logs of every table (:func:`read_commit_logs`)."""
        return read_commit_logs(self.storage, list(self.servers), TABLES)

    def save_store_segments(self, path: Path) -> None:
        """Every table's announced segments as the store's primary holds them now (its
        ``segs`` hashes: segment key -> segment JSON), written to ``path`` as JSON."""
        from horizon_broker._core.keys import Keys

        keys = Keys()
        with self.group.client(self.group.primary_port()) as primary:
            hashes = {
                keys.segments(table): {
                    field.decode(): json.loads(value)
                    for field, value in primary.hgetall(keys.segments(table)).items()
                }
                for table in TABLES
            }
        path.write_text(json.dumps(hashes, indent=1, sort_keys=True))

    def wait_for_broker(self, client: Any, timeout: float = 180.0, name: str = BROKERS[0]) -> None:
        broker = self.brokers[name]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if client.health() == "SERVING":
                    return
            except Exception:  # not up yet
                pass
            if not broker.alive:
                raise RuntimeError(f"{name} exited: see {broker.log}")
            time.sleep(0.5)
        raise RuntimeError(f"{name} did not start within {timeout} s: see {broker.log}")
