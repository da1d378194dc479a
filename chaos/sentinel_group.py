"""A real Sentinel deployment on loopback: a primary, a replica and three sentinels, all
``redis-server`` processes (sentinels in ``--sentinel`` mode), and the one fault the failover
contract is about: a replica promoted *without* the last writes its primary acknowledged.

Replication is cut the way an operator's network would cut it: the replica authenticates to its
primary as the ACL user ``repl``; switching that user off on the primary and dropping its link
leaves the replica unable to reconnect, while clients (and sentinels) go on as before. Whatever
the primary acknowledges from then on is on the primary alone, until a failover throws it away.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from horizon_broker.watermark.embedded_redis import free_port

MASTER = "horizon"
REPL_PASSWORD = "repl-secret"
DOWN_AFTER_MS = 1000
ONCE = Retry(NoBackoff(), 0)
SENTINEL_TIMING = {"INFO-PERIOD": 1000}
"""Sentinel's own periods (``SENTINEL DEBUG``): INFO every second instead of every ten, so the
sentinels see a demoted primary follow within about a second (each failover waits for that: a
sentinel that never saw the old primary as a replica turns it back into one the moment the next
failover promotes it). Not shorter: Sentinel asks a replica whose link is down for INFO once a
second whatever this says, and it promotes only a replica whose last INFO is younger than three
periods. The publish period stays at its 2 s, and Sentinel's own demotion of an old primary
waits four of them (so :meth:`SentinelGroup.fail_over` demotes it itself): shorter, a sentinel
that had not yet heard of a failover demoted the replica just promoted."""


def distinct_free_ports(count: int) -> list[int]:
    """``count`` different free ports: each ``free_port`` is only free when asked, so two calls
    can name the same one (a sentinel then fails to bind, and its ping reaches the node)."""
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


class SentinelGroup:
    """Two data nodes (one primary, one replica) and three sentinels watching them."""

    def __init__(self) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="horizon-sentinel-"))
        ports = distinct_free_ports(5)
        self.data_ports = ports[:2]
        self.sentinel_ports = ports[2:]
        self.processes: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{port}" for port in self.sentinel_ports)
        return f"redis+sentinel://{hosts}/{MASTER}/0"

    def start(self) -> SentinelGroup:
        primary, replica = self.data_ports
        try:
            self._data_node(primary, replica_of=None)
            self._data_node(replica, replica_of=primary)
            for port in self.sentinel_ports:
                self._sentinel(port, primary)
                with self.client(port) as sentinel:
                    timing = [str(item) for pair in SENTINEL_TIMING.items() for item in pair]
                    sentinel.execute_command("SENTINEL", "DEBUG", *timing)
            self.wait_until(lambda: self._replicas_known() and self.replicated(), "the group")
        except BaseException:
            self.close()  # no process outlives a group that never started
            raise
        return self

    def replicated(self) -> bool:
        """Everything the primary acknowledged so far is on the replica (``WAIT 1``)."""
        with self.client(self.primary_port()) as primary:
            return int(primary.execute_command("WAIT", 1, 1000)) >= 1

    def _data_node(self, port: int, replica_of: int | None) -> None:
        folder = self.directory / str(port)
        folder.mkdir()
        conf = folder / "redis.conf"
        lines = [
            f"port {port}",
            "bind 127.0.0.1",
            f"dir {folder}",
            'save ""',
            "appendonly no",
            "protected-mode no",
            f"user repl on >{REPL_PASSWORD} +@all ~* &*",
            "user default on nopass +@all ~* &*",
            "masteruser repl",
            f"masterauth {REPL_PASSWORD}",
            "repl-ping-replica-period 1",
            "repl-diskless-sync no",
            "repl-diskless-sync-delay 0",
            "repl-timeout 5",
        ]
        if replica_of is not None:
            lines.append(f"replicaof 127.0.0.1 {replica_of}")
        conf.write_text("\n".join(lines) + "\n")
        self._spawn(port, [str(conf)])

    def _sentinel(self, port: int, primary: int) -> None:
        folder = self.directory / f"sentinel-{port}"
        folder.mkdir()
        conf = folder / "sentinel.conf"
        conf.write_text(
            "\n".join(
                [
                    f"port {port}",
                    "bind 127.0.0.1",
                    f"dir {folder}",
                    "protected-mode no",
                    f"sentinel monitor {MASTER} 127.0.0.1 {primary} 2",
                    f"sentinel down-after-milliseconds {MASTER} {DOWN_AFTER_MS}",
                    f"sentinel failover-timeout {MASTER} 10000",
                    f"sentinel parallel-syncs {MASTER} 1",
                ]
            )
            + "\n"
        )
        self._spawn(port, [str(conf), "--sentinel"])

    def _spawn(self, port: int, args: list[str]) -> None:
        binary = shutil.which("redis-server")
        assert binary is not None, "redis-server is not installed"
        self.processes[port] = subprocess.Popen(
            [binary, *args, "--loglevel", "warning"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.wait_until(lambda: self._pings(port), f"redis-server on port {port}")

    # -- looking --------------------------------------------------------------------------

    def client(self, port: int) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=port, socket_timeout=2)

    def primary_port(self) -> int:
        """The primary the sentinels name now."""
        with self.client(self.sentinel_ports[0]) as sentinel:
            _host, port = sentinel.sentinel_get_master_addr_by_name(MASTER)
        return int(port)

    def replica_port(self) -> int:
        primary = self.primary_port()
        return next(port for port in self.data_ports if port != primary)

    def replica_in_sync(self) -> bool:
        with self.client(self.replica_port()) as replica:
            info = replica.info("replication")
        return info.get("master_link_status") == "up"

    def _replicas_known(self) -> bool:
        for port in self.sentinel_ports:
            with self.client(port) as sentinel:
                if not sentinel.sentinel_slaves(MASTER):
                    return False
        return True

    def _pings(self, port: int) -> bool:
        try:  # one attempt: redis-py's default retries back off for seconds on a refused port
            with redis.Redis(host="127.0.0.1", port=port, socket_timeout=2, retry=ONCE) as client:
                return bool(client.ping())
        except redis.ConnectionError:
            return False

    @staticmethod
    def wait_until(condition: object, what: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if condition():  # type: ignore[operator]
                    return
            except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError):
                pass
            time.sleep(0.05)
        raise AssertionError(f"{what} was not ready within {timeout:g} s")

    # -- faults ---------------------------------------------------------------------------

    def cut_replication(self) -> None:
        """From now on the primary's writes stay on the primary: its replica cannot follow."""
        self.wait_until(self.replicated, "the replica catching up")
        with self.client(self.primary_port()) as primary:
            primary.execute_command("ACL", "SETUSER", "repl", "off")
            primary.execute_command("CLIENT", "KILL", "USER", "repl")
        self.wait_until(lambda: not self.replica_in_sync(), "the cut")

    def heal_replication(self) -> None:
        """Let the replica follow its primary again (it reconnects by itself)."""
        for port in self.data_ports:
            with self.client(port) as node:
                node.execute_command("ACL", "SETUSER", "repl", "on")
        self.wait_until(self.replicated, "the replica catching up")

    def fail_over(self) -> int:
        """Promote the replica (``SENTINEL FAILOVER``); returns the new primary's port once every
        sentinel names it, the old primary follows it (so what only it had is gone) and every
        sentinel saw it follow."""
        old = self.primary_port()
        new = self.replica_port()
        self.wait_until(self._request_failover, "the sentinels accepting SENTINEL FAILOVER")
        self.wait_until(lambda: self._all_name(new), "the failover")
        with self.client(new) as promoted:
            promoted.execute_command("ACL", "SETUSER", "repl", "on")
        with self.client(old) as demoted:
            demoted.execute_command("ACL", "SETUSER", "repl", "on")
        self._demote(old, new)
        self.wait_until(self.replicated, "the old primary following the new one")
        self.wait_until(lambda: self._all_see_following(old), "the sentinels seeing it follow")
        return new

    def _demote(self, old: int, new: int) -> None:
        """What a sentinel sends an old primary that is back, without its 8 s wait: follow the
        new primary, and drop every client so each one looks for the primary again."""
        try:
            with self.client(old) as demoted:
                steps = demoted.pipeline(transaction=True)
                steps.execute_command("REPLICAOF", "127.0.0.1", str(new))
                steps.execute_command("CLIENT", "KILL", "TYPE", "normal")
                steps.execute_command("CLIENT", "KILL", "TYPE", "pubsub")
                steps.execute()
        except redis.ConnectionError:
            pass  # our own connection went with the others, maybe before the reply

    def _all_see_following(self, port: int) -> bool:
        """Every sentinel's last INFO of ``port`` shows a replica with its link up."""
        for sentinel_port in self.sentinel_ports:
            with self.client(sentinel_port) as sentinel:
                replicas = sentinel.sentinel_slaves(MASTER)
            seen = next((r for r in replicas if int(r["port"]) == port), None)
            if seen is None or seen.get("role-reported") != "slave":
                return False
            if seen.get("master-link-status") != "ok" or "disconnected" in seen["flags"]:
                return False
        return True

    def _request_failover(self) -> bool:
        """Ask for the failover once; refused (NOGOODSLAVE, asked again) while the sentinels'
        view of the replica is stale, e.g. their links to a just-demoted primary reconnecting."""
        try:
            with self.client(self.sentinel_ports[0]) as sentinel:
                sentinel.execute_command("SENTINEL", "FAILOVER", MASTER)
        except redis.ResponseError as refused:
            if str(refused).startswith("INPROG"):
                return True  # an earlier ask went through (its reply was lost): never ask twice
            if str(refused).startswith("NOGOODSLAVE"):
                return False
            raise
        return True

    def _all_name(self, port: int) -> bool:
        for sentinel_port in self.sentinel_ports:
            with self.client(sentinel_port) as sentinel:
                _host, named = sentinel.sentinel_get_master_addr_by_name(MASTER)
            if int(named) != port:
                return False
        with self.client(port) as node:
            return node.info("replication")["role"] == "master"

    def close(self) -> None:
        for process in self.processes.values():
            process.kill()
        for process in self.processes.values():
            process.wait(timeout=10)
        self.processes.clear()
        shutil.rmtree(self.directory, ignore_errors=True)
