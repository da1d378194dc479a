"""The processes a fault-injection run drives, each a real OS process it can kill, pause and
restart: a persistent redis-server, the broker (``horizon serve``), ingestion servers
(:mod:`chaos.worker`) and compaction runs (``horizon compact``)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from horizon_broker.watermark.embedded_redis import EmbeddedRedis, free_port

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


class Cluster:
    """Redis, the broker and the ingestion servers of one run, in ``work``."""

    def __init__(
        self,
        work: Path,
        servers: dict[str, list[int]],
        *,
        recheck_s: float = 2.0,
        mutation: str | None = None,
    ):
        """``mutation`` (:mod:`chaos.mutations`) is planted in the processes it names."""
        self.work = work
        self.storage = work / "storage"
        self.logs = work / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.redis = EmbeddedRedis(persistence=True)
        self.port = free_port()
        self.definitions = table_definitions(self.storage)
        for name, definition in self.definitions.items():
            (work / f"{name}.json").write_text(json.dumps(definition))
            (work / f"{name}.toml").write_text(toml_text(definition))
        config = work / "broker.toml"
        config.write_text(
            "[server]\n"
            f'listen = "127.0.0.1:{self.port}"\n'
            "grace_s = 1.0\n"
            "[state]\n"
            f'redis_url = "{self.redis.url}"\n'
            "heartbeat_timeout_s = 5.0\n"
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
        horizon = str(Path(sys.executable).with_name("horizon"))
        self.broker = Process(
            "broker", [horizon, "serve", "--config", str(config)], self.logs / "broker.log"
        )
        self.servers = {
            name: Process(
                name,
                [
                    sys.executable, "-m", "chaos.worker", "--work", str(work), "--server-id",
                    name, "--redis", self.redis.url, "--partitions",
                    ",".join(str(p) for p in partitions),
                ],
                self.logs / f"{name}.log",
            )
            for name, partitions in servers.items()
        }  # fmt: skip
        self.compactor = Process(
            "compactor",
            [horizon, "compact", "--table", str(work / f"{BANK}.toml"), "--redis",
             self.redis.url, "--spark-master", "local[1]"],
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
                BROKER: [self.broker],
                SERVER: list(self.servers.values()),
                COMPACTOR: [self.compactor, self.compaction_pass],
            }[planted.process]
            for process in targets:
                process.command = mutated_command(planted.name, process.command)

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        self.redis.start()
        for server in self.servers.values():
            server.start()
        self.broker.start()

    def stop(self) -> None:
        for process in (
            self.compactor, self.compaction_pass, self.broker, *self.servers.values()
        ):  # fmt: skip
            process.stop()
        self.redis.close()

    def wait_for_broker(self, client: Any, timeout: float = 180.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if client.health() == "SERVING":
                    return
            except Exception:  # not up yet
                pass
            if not self.broker.alive:
                raise RuntimeError(f"the broker exited: see {self.broker.log}")
            time.sleep(0.5)
        raise RuntimeError(f"the broker did not start within {timeout} s: see {self.broker.log}")
