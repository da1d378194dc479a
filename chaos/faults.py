"""The faults of a run, injected one at a time at seeded random moments, each recorded with when
it was in force (or, for one this machine cannot inject, why not); and the supervisor that restarts a process that died on its own (as systemd
would), except the one a fault is holding down."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from chaos import proxy, worker
from chaos.cluster import BANK, HEARTBEAT_TIMEOUT_S, Cluster
from chaos.history import Fault
from chaos.skewed import write_offset
from horizon_broker.client import connect

FAULT_KINDS = (
    "server_kill",
    "server_park",
    "server_stall",
    "primary_pause",
    "primary_failover",
    "partition_server",
    "partition_broker",
    "clock_skew",
    "disk_full",
    "broker_kill",
    "segment_file",
    "compaction_kill",
)
SERVER_LANE = frozenset(
    {"server_kill", "server_park", "server_stall", "partition_server", "clock_skew"}
)
"""The kinds a short run injects in one lane (the servers' processes); the store's, the
brokers' and the storage's in the other."""
MAX_GAP_S = 20.0
"""A long run still has a fault every 10 to 30 s."""
NOT_RUNNABLE = object()
"""What a kind returns when this machine cannot inject it."""
PAUSE_S = (6.0, 9.0)
"""Redis pauses and server stalls outlast the 5 s heartbeat timeout."""
SHORT_PAUSE_S = (5.5, 6.5)
"""The same in a short run: just past the heartbeat timeout."""


class Faults:
    def __init__(self, cluster: Cluster, client: Any, seed: int, *, short: bool = False) -> None:
        """``short``: windows just past the heartbeat timeout (the short run of the tests)."""
        self.cluster = cluster
        self.client = client
        self.random = random.Random(seed)
        self.short = short
        self.pause_s = SHORT_PAUSE_S if short else PAUSE_S
        self.not_runnable: dict[str, str] = {}
        """Kinds this machine cannot inject, and why (a full disk without a mount)."""
        self.failures: dict[str, str] = {}
        """Kinds whose injection failed (a broker that did not come back), with the error."""
        self.recorded: list[Fault] = []
        self.counts: Counter[str] = Counter()
        self.held: set[str] = set()
        """Processes a fault keeps down or paused: the supervisor leaves them alone."""
        self.restarts: Counter[str] = Counter()
        """Processes the supervisor restarted after they died on their own."""
        self.parks: Counter[str] = Counter()
        """How the servers stopped by ``server_park`` exited (``clean``: parked, exit code 0)."""
        self.stop = threading.Event()
        self._lock = threading.Lock()

    # -- the schedule ----------------------------------------------------------------------------

    def run(self, deadline: float, first: Sequence[str] = (), *, others: bool = True) -> None:
        """Every kind once in a shuffled order, then at random, until ``deadline``; the kinds
        not yet injected by then still are, one after another, so a short run has them all.
        ``first`` are injected before the others (a planted bug that needs them early);
        ``others`` False injects those only. A short run injects its kinds in two lanes at once
        (the servers' faults beside the store's and the brokers'), each still one at a time."""
        kinds = list(FAULT_KINDS) if others else []
        self.random.shuffle(kinds)
        kinds = [*first, *kinds]
        all_kinds = FAULT_KINDS if others else ()
        if not self.short:
            self._schedule(deadline, kinds, all_kinds)
            return
        lanes = [
            threading.Thread(
                target=self._schedule,
                args=(deadline, [k for k in kinds if (k in SERVER_LANE) == lane], ()),
                daemon=True,
            )
            for lane in (True, False)
        ]
        for thread in lanes:
            thread.start()
        for thread in lanes:
            thread.join()

    def _schedule(self, deadline: float, kinds: list[str], all_kinds: Sequence[str]) -> None:
        while not self.stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0 and not kinds:
                return
            gap = min(MAX_GAP_S, max(1.0, left / (len(kinds) + 1))) if left > 0 else 1.0
            if self.stop.wait(self.random.uniform(0.5, 1.5) * gap):
                return
            if kinds:
                self.inject(kinds.pop(0))
            elif not all_kinds:
                return
            elif time.monotonic() < deadline:
                self.inject(self.random.choice(all_kinds))

    def inject(self, kind: str) -> Fault:
        """Inject ``kind``, or ``kind:variant`` (``segment_file:vanish``: not cut short)."""
        kind, _, variant = kind.partition(":")
        started = time.monotonic()
        try:
            if getattr(self, f"_{kind}")(*([variant] if variant else [])) is NOT_RUNNABLE:
                return Fault(kind, started, started)
        except Exception as error:  # the run goes on, and reports it
            self.failures[kind] = f"{type(error).__name__}: {error}"[:300]
        fault = Fault(kind, started, time.monotonic())
        with self._lock:
            self.recorded.append(fault)
            self.counts[kind] += 1
        return fault

    # -- the kinds -------------------------------------------------------------------------------

    def _server_kill(self) -> None:
        name = self.random.choice(sorted(self.cluster.servers))
        server = self.cluster.servers[name]
        with self._holding(name):
            server.kill()
            time.sleep(self.random.uniform(0.5, 3.0))
            self._restart(name, server)

    def _server_park(self) -> None:
        """A clean stop (SIGTERM: the server finishes its batch and parks every partition), a
        few seconds away, and a restart that resumes them: no answer at a snapshot served while
        it was parked may change."""
        name = self.random.choice(sorted(self.cluster.servers))
        server = self.cluster.servers[name]
        with self._holding(name):
            code = server.stop(timeout=120.0)
            self.parks["clean" if code == 0 else f"exit code {code}"] += 1
            time.sleep(self.random.uniform(*((1.0, 2.0) if self.short else (3.0, 8.0))))
            self._restart(name, server)

    @staticmethod
    def _restart(name: str, server: Any) -> None:
        """Start a stopped server again; its fault lasts until it is back at work: its first
        batch committed, or nothing left to ingest (a loaded machine may take a minute to start
        its Spark and run a cold first batch). The checker's settle time counts from then."""
        server.start()
        server.wait_ready(worker.BATCH_MARK, worker.CAUGHT_UP_MARK)

    def _server_stall(self) -> None:
        name = self.random.choice(sorted(self.cluster.servers))
        server = self.cluster.servers[name]
        with self._holding(name):
            server.pause()
            time.sleep(self.random.uniform(*self.pause_s))
            server.resume()

    def _primary_pause(self) -> None:
        """The primary stops answering (SIGSTOP) past the sentinels' down-after: they promote
        the replica; the old primary, resumed, follows it."""
        group = self.cluster.group
        process = group.processes[group.primary_port()]
        with self._holding("redis"):
            os.killpg(process.pid, signal.SIGSTOP)
            try:
                time.sleep(self.random.uniform(*self.pause_s))
            finally:
                os.killpg(process.pid, signal.SIGCONT)
            group.wait_until(group.replicated, "the old primary following", timeout=60)

    def _primary_failover(self, variant: str = "") -> None:
        """The replica promoted *without* the last writes the primary acknowledged: replication
        is cut, the workload goes on (announcements, reports, grants on the primary alone), then
        the sentinels promote the replica and the old primary follows it, losing them. Variant
        ``servers_paused``: the servers are stopped (SIGSTOP) across the promotion and a few
        seconds past it, so for a while nobody puts back what the store lost (a quiet table's
        heartbeat clocks: its computed LWM goes down under the served one)."""
        group = self.cluster.group
        paused = sorted(self.cluster.servers) if variant == "servers_paused" else []
        with self._holding("redis"), contextlib.ExitStack() as holds:
            for name in paused:
                holds.enter_context(self._holding(name))
            group.cut_replication()
            try:
                time.sleep(self.random.uniform(1.5, 3.0))
                for name in paused:
                    self.cluster.servers[name].pause()
                group.fail_over()
                if paused:
                    time.sleep(self.random.uniform(*self.pause_s) / 2)
            finally:
                for name in paused:
                    self.cluster.servers[name].resume()
                group.heal_replication()

    def _partition_server(self) -> None:
        self._partition(self.random.choice(sorted(self.cluster.servers)))

    def _partition_broker(self) -> None:
        self._partition(self.random.choice(sorted(self.cluster.brokers)))

    def _partition(self, name: str) -> None:
        """``name`` cut off from the store: its connections hang (stall) past the heartbeat
        timeout, then are reset and refused (drop) for a while, then the link heals."""
        link = self.cluster.links[name]
        try:
            link.set(proxy.STALL)
            time.sleep(self.random.uniform(*self.pause_s))
            link.set(proxy.DROP)
            time.sleep(self.random.uniform(1.0, 3.0))
        finally:
            link.set(proxy.OPEN)

    def _clock_skew(self) -> None:
        """An ingestion server's wall clock stepped ahead, then behind, by twice the heartbeat
        timeout, then true again (its monotonic clock untouched)."""
        name = self.random.choice(sorted(self.cluster.servers))
        offset_file = self.cluster.skews[name]
        seconds = 2 * HEARTBEAT_TIMEOUT_S
        try:
            for direction in (1, -1):
                write_offset(offset_file, direction * seconds)
                time.sleep(self.random.uniform(self.pause_s[0] / 2, self.pause_s[1] / 2))
        finally:
            write_offset(offset_file, 0.0)

    def _disk_full(self) -> object:
        """Segment storage full (real ENOSPC: a filler file takes what the size-limited
        filesystem has left) for a few seconds, then freed."""
        if self.cluster.disk_limited is not None:
            self.not_runnable["disk_full"] = self.cluster.disk_limited
            return NOT_RUNNABLE
        filler = self.cluster.storage / ".chaos-filler"
        chunk = b"\0" * (1 << 20)
        try:
            with filler.open("wb", buffering=0) as handle, contextlib.suppress(OSError):  # ENOSPC
                while True:
                    handle.write(chunk)
            time.sleep(self.random.uniform(*self.pause_s))
        finally:
            filler.unlink(missing_ok=True)
        return None

    def _broker_kill(self) -> None:
        """One of the two brokers killed and started again (the other answers meanwhile)."""
        name = self.random.choice(sorted(self.cluster.brokers))
        broker = self.cluster.brokers[name]
        with self._holding(name):
            broker.kill()
            time.sleep(self.random.uniform(0.5, 2.0))
            broker.start()
            target = self.cluster.targets[sorted(self.cluster.brokers).index(name)]
            with connect(target, timeout=10.0) as client:
                self.cluster.wait_for_broker(client, name=name)

    def _segment_file(self, variant: str = "") -> None:
        """A file of a visible segment vanishes (or is cut in half) for a few seconds under the
        running queries, then comes back. ``variant`` ``vanish`` or ``truncate`` chooses."""
        try:
            timeline = self.client.timeline(BANK)
        except Exception:
            return
        files = [
            path
            for chunk in timeline.chunks
            for group in chunk.groups
            for segment in group.segments
            for path in segment.location
        ]
        if not files:
            return
        path = Path(self.random.choice(files).removeprefix("file:"))
        aside = path.with_name(path.name + ".aside")
        truncate = variant == "truncate" or (not variant and self.random.random() < 0.5)
        try:
            if truncate:
                shutil.copy2(path, aside)
                with path.open("r+b") as handle:
                    handle.truncate(max(1, path.stat().st_size // 2))
            else:
                path.rename(aside)
        except FileNotFoundError:
            return  # replaced and collected meanwhile
        time.sleep(self.random.uniform(3.0, 6.0))
        aside.replace(path)

    def _compaction_kill(self) -> None:
        compactor = self.cluster.compactor
        with self._holding("compactor"):
            compactor.start()
            time.sleep(self.random.uniform(4.0, 8.0 if self.short else 15.0))
            compactor.kill()

    # -- supervision -----------------------------------------------------------------------------

    def supervise(self) -> None:
        """Restart a server or the broker that exited on its own, once a second."""
        while not self.stop.wait(1.0):
            for name, process in [*self.cluster.servers.items(), *self.cluster.brokers.items()]:
                with self._lock:
                    held = name in self.held
                if not held and not process.alive:
                    self.restarts[name] += 1
                    process.start()

    def settle(self) -> None:
        """Everything running and resumed (after the last fault)."""
        for link in self.cluster.links.values():
            link.set(proxy.OPEN)
        for process in (*self.cluster.servers.values(), *self.cluster.brokers.values()):
            process.resume()
            if not process.alive:
                process.start()

    @contextmanager
    def _holding(self, name: str) -> Iterator[None]:
        with self._lock:
            self.held.add(name)
        try:
            yield
        finally:
            with self._lock:
                self.held.discard(name)
