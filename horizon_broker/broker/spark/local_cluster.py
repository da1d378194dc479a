"""A Spark standalone cluster or a Spark Connect server on this machine, from the installed
pyspark (its jars, ``bin/spark-class`` and ``sbin/start-connect-server.sh``; nothing to download).

For tests, the demo's ``--cluster`` run and anyone who wants to try Horizon against a real cluster
before pointing it at theirs::

    python -m horizon_broker.broker.spark.local_cluster standalone --workers 2   # prints spark://127.0.0.1:P
    python -m horizon_broker.broker.spark.local_cluster connect                  # prints sc://127.0.0.1:P

:class:`BrokerProcess` runs ``horizon serve`` against one of them (a process of its own: one
Python process holds one Spark context). Every process is started in its own process group, on
loopback, and stopped by its process id (the group: the JVM and the launcher script), never by
name.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from horizon_broker._core.errors import Unavailable
from horizon_broker.watermark.embedded_redis import free_port

HOST = "127.0.0.1"


def spark_home() -> Path:
    """The installed pyspark package, which is a Spark distribution."""
    import pyspark

    return Path(pyspark.__file__).parent


def _environment(log_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        SPARK_HOME=str(spark_home()),
        SPARK_LOCAL_IP=HOST,
        SPARK_LOG_DIR=str(log_dir),
        SPARK_PID_DIR=str(log_dir),
        PYSPARK_PYTHON=env.get("PYSPARK_PYTHON", sys.executable),
        SPARK_NO_DAEMONIZE="1",
    )
    return env


class _Processes:
    """Started processes, each in its own group, with their logs in one directory."""

    def __init__(self, prefix: str) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix=prefix))
        self.env = _environment(self.directory)
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        log = (self.directory / f"{name}.log").open("wb")
        process = subprocess.Popen(
            args, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()
        self.processes.append(process)
        return process

    def log_tail(self, lines: int = 20) -> str:
        text = []
        for path in sorted(self.directory.glob("*.log")):
            tail = path.read_text(errors="replace").splitlines()[-lines:]
            text.append(f"--- {path.name}\n" + "\n".join(tail))
        return "\n".join(text)

    def stop(self) -> None:
        for process in reversed(self.processes):
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGTERM)
                except ProcessLookupError:
                    continue
        deadline = time.monotonic() + 15
        for process in self.processes:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)
            _wait_for_group(process.pid, deadline)
        self.processes.clear()
        shutil.rmtree(self.directory, ignore_errors=True)


class StandaloneCluster:
    """A standalone master and ``workers`` workers (``cores`` each) on loopback."""

    def __init__(self, *, workers: int = 2, cores: int = 1, memory: str = "1g") -> None:
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.port = free_port()
        self.ui_port = free_port()
        self._processes = _Processes("horizon-spark-cluster-")

    @property
    def url(self) -> str:
        return f"spark://{HOST}:{self.port}"

    def start(self, timeout_s: float = 90.0) -> StandaloneCluster:
        spark_class = str(spark_home() / "bin" / "spark-class")
        self._processes.start(
            "master",
            [spark_class, "org.apache.spark.deploy.master.Master", "--host", HOST,
             "--port", str(self.port), "--webui-port", str(self.ui_port)],
        )  # fmt: skip
        for number in range(self.workers):
            work = self._processes.directory / f"worker-{number}"
            self._processes.start(
                f"worker-{number}",
                [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", HOST,
                 "--cores", str(self.cores), "--memory", self.memory,
                 "--webui-port", str(free_port()), "--work-dir", str(work), self.url],
            )  # fmt: skip
        try:
            self._wait_for_workers(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def alive_workers(self) -> int:
        """How many workers the master has registered (its web UI's JSON)."""
        with urllib.request.urlopen(f"http://{HOST}:{self.ui_port}/json/", timeout=2) as reply:
            return int(json.load(reply).get("aliveworkers", 0))

    def _wait_for_workers(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for process in self._processes.processes:
                if process.poll() is not None:
                    raise Unavailable(
                        f"a Spark cluster process exited ({process.args[1]}):\n"
                        + self._processes.log_tail()
                    )
            try:
                if self.alive_workers() >= self.workers:
                    return
            except (OSError, ValueError):
                pass  # the master's UI is not up yet, or answered before its page was ready
            time.sleep(0.5)
        raise Unavailable(
            f"the Spark master at {self.url} did not register {self.workers} workers within "
            f"{timeout_s:.0f}s:\n" + self._processes.log_tail()
        )

    def stop(self) -> None:
        self._processes.stop()

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ConnectServer:
    """A Spark Connect server (its own local Spark) on a loopback port."""

    def __init__(self, *, master: str = "local[2]", conf: dict[str, str] | None = None) -> None:
        self.master = master
        self.conf = dict(conf or {})
        self.port = free_port()
        self._processes = _Processes("horizon-spark-connect-")

    @property
    def url(self) -> str:
        return f"sc://{HOST}:{self.port}"

    def start(self, timeout_s: float = 120.0) -> ConnectServer:
        script = str(spark_home() / "sbin" / "start-connect-server.sh")
        args = [script, "--wait", "--master", self.master,
                "--conf", f"spark.connect.grpc.binding.port={self.port}",
                "--conf", f"spark.connect.grpc.binding.address={HOST}"]  # fmt: skip
        for key, value in self.conf.items():
            args += ["--conf", f"{key}={value}"]
        process = self._processes.start("connect", args)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if process.poll() is not None:
                self.stop()
                raise Unavailable("the Spark Connect server exited:\n" + self._processes.log_tail())
            if _accepts(HOST, self.port):
                return self
            time.sleep(0.5)
        tail = self._processes.log_tail()
        self.stop()
        raise Unavailable(
            f"Spark Connect did not listen on {self.url} in {timeout_s:.0f}s:\n{tail}"
        )

    def stop(self) -> None:
        self._processes.stop()

    def __enter__(self) -> ConnectServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class BrokerProcess:
    """``horizon serve`` as a process with a TOML configuration whose ``[spark]`` part is
    ``spark_section`` (a cluster master or a Connect URL); stopped with SIGTERM, then SIGKILL."""

    def __init__(
        self, directory: Path, redis_url: str, spark_section: str, *, name: str = "broker"
    ) -> None:
        self.port = free_port()
        self.config = directory / f"{name}.toml"
        self.config.write_text(
            f'[server]\nlisten = "{HOST}:{self.port}"\ngrace_s = 1.0\n\n'
            f'[state]\nredis_url = "{redis_url}"\nunreadable_recheck_s = 0.5\n\n'
            # Not the fixed default ports: brokers share a machine.
            f'[flight]\nlisten = "{HOST}:0"\n\n[metrics]\nlisten = "{HOST}:0"\n\n'
            f'[console]\nlisten = "{HOST}:0"\n\n'
            f"{spark_section}"
        )
        self.log = directory / f"{name}.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def target(self) -> str:
        return f"{HOST}:{self.port}"

    def start(self, timeout_s: float = 180.0) -> BrokerProcess:
        horizon = str(Path(sys.executable).with_name("horizon"))
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [horizon, "serve", "--config", str(self.config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, "SPARK_LOCAL_IP": HOST},
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise Unavailable(f"the broker exited:\n{self._log_tail()}")
            if _serving(self.target):
                return self
            time.sleep(1)
        self.stop()
        raise Unavailable(f"the broker did not start in {timeout_s:.0f}s:\n{self._log_tail()}")

    def _log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def __enter__(self) -> BrokerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _wait_for_group(group: int, deadline: float) -> None:
    """Wait until every process of ``group`` (the JVM a launcher script started) is gone."""
    killed = False
    while True:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return
        if time.monotonic() > deadline:
            if killed:
                return  # nothing more to do; the kernel reaps it
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGKILL)
            killed, deadline = True, time.monotonic() + 10
        time.sleep(0.1)


def _accepts(host: str, port: int) -> bool:
    import socket

    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kind", choices=["standalone", "connect"])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--cores", type=int, default=1, help="cores per worker")
    parser.add_argument("--memory", default="1g", help="memory per worker")
    args = parser.parse_args(argv)
    if args.kind == "standalone":
        running: StandaloneCluster | ConnectServer = StandaloneCluster(
            workers=args.workers, cores=args.cores, memory=args.memory
        )
    else:
        running = ConnectServer()
    stop_signals = {signal.SIGINT, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)
    with running:
        print(f"{running.url}  (Ctrl-C stops it)", flush=True)
        signal.sigwait(stop_signals)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


def _serving(target: str) -> bool:
    """Whether the gRPC health service at ``target`` answers SERVING (False: not listening yet)."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(target) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=2
            )
        except grpc.RpcError:
            return False
    return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)
