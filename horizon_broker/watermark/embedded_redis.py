"""An embedded redis-server child process on a free loopback port.

``horizon demo`` starts its own Redis with it (stopped on exit), and tests use it for the one
session-wide server and for private servers they kill and restart. It runs the real
``redis-server`` binary: Horizon never fakes Redis.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import redis

from horizon_broker._core.errors import Unavailable


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class EmbeddedRedis:
    """A redis-server child process on 127.0.0.1, restartable on the same port and directory."""

    def __init__(self, *, persistence: bool = False, port: int | None = None) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise Unavailable(
                "redis-server is not installed: run `make test` (or `apt-get install redis-server`)"
            )
        self.binary = binary
        self.port = port or free_port()
        self.persistence = persistence
        self.directory = Path(tempfile.mkdtemp(prefix="horizon-redis-"))
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> EmbeddedRedis:
        args = [
            self.binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.directory),
            "--daemonize",
            "no",
            "--protected-mode",
            "yes",
            "--loglevel",
            "warning",
        ]
        if self.persistence:
            args += ["--appendonly", "yes", "--appendfsync", "always", "--save", ""]
        else:
            args += ["--appendonly", "no", "--save", ""]
        # A session of its own: Ctrl-C in the owner's terminal reaches the whole foreground
        # group, and a store gone first made the stopping broker log that it lost its state.
        self.process = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        deadline = time.monotonic() + 10
        client = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=0.5)
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise Unavailable(f"redis-server did not start on port {self.port}") from None
                time.sleep(0.02)
            finally:
                client.close()
        return self

    def stop(self, *, kill: bool = False) -> None:
        """Stop the server; ``kill=True`` sends SIGKILL (no shutdown save), like a crash."""
        if self.process is None:
            return
        if kill:
            self.process.kill()
        else:
            self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
        self.process = None

    def restart(self, *, kill: bool = False) -> None:
        self.stop(kill=kill)
        self.start()

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)
