"""A TCP proxy on loopback in front of the real redis-server that loses replies on purpose.

It forwards every byte both ways, except that a command carrying an armed marker (a script's
SHA1, so its EVALSHA) is forwarded, the server runs it, and the first bytes of its reply close
the client's connection instead of reaching it: the script took effect, the caller sees a
connection error (and its client retries, through the proxy again); or the command is lost
before it reaches Redis (it never runs). ``blackout`` makes the proxy
refuse every connection from the next lost reply on (Redis unreachable: nothing can be read
back).
"""

from __future__ import annotations

import contextlib
import hashlib
import selectors
import socket
import threading
from collections.abc import Callable


def script_sha(text: str) -> bytes:
    """The SHA1 redis-py calls a script by (EVALSHA), as the marker to arm."""
    return hashlib.sha1(text.encode()).hexdigest().encode()


class LostReplyProxy:
    def __init__(self, redis_port: int) -> None:
        self._target = ("127.0.0.1", redis_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._marker = b""
        self._remaining = 0
        self._on_drop: Callable[[], None] | None = None
        self._blackout = False
        self._requests = False
        self._refusing = False
        self.dropped = 0
        self._open: set[socket.socket] = set()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True, name="lost-reply-proxy").start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def lose_replies(
        self,
        marker: bytes,
        times: int = 1,
        *,
        on_drop: Callable[[], None] | None = None,
        blackout: bool = False,
        requests: bool = False,
    ) -> None:
        """Lose the replies of the next ``times`` commands carrying ``marker``; ``on_drop`` runs
        after each such command ran and before its caller sees the connection drop. With
        ``requests`` the commands themselves are lost instead (they never run)."""
        with self._lock:
            self._marker, self._remaining = marker, times
            self._on_drop, self._blackout = on_drop, blackout
            self._requests = requests

    def reachable(self) -> None:
        """Accept connections again after a blackout, and lose no more replies."""
        with self._lock:
            self._refusing, self._remaining = False, 0

    def close(self) -> None:
        self._closed = True
        self._listener.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                refusing = self._refusing
            if refusing:
                client.close()
                continue
            with self._lock:
                self._open.add(client)
            threading.Thread(target=self._relay, args=(client,), daemon=True).start()

    def _relay(self, client: socket.socket) -> None:
        try:
            server = socket.create_connection(self._target)
        except OSError:
            client.close()
            return
        selector = selectors.DefaultSelector()
        selector.register(client, selectors.EVENT_READ, server)
        selector.register(server, selectors.EVENT_READ, client)
        awaiting = False  # an armed command was forwarded: its reply is to be lost
        try:
            while True:
                for key, _ in selector.select():
                    source: socket.socket = key.fileobj  # type: ignore[assignment]
                    data = source.recv(65536)
                    if not data:
                        return
                    if source is client:
                        with self._lock:
                            armed = self._remaining > 0 and self._marker in data
                            requests = self._requests
                        if armed and requests and self._take_drop():
                            return
                        awaiting = armed
                    elif awaiting:
                        awaiting = False
                        if not data.startswith(b"-NOSCRIPT") and self._take_drop():
                            return
                    key.data.sendall(data)
        except OSError:
            return
        finally:
            with self._lock:
                self._open.discard(client)
            selector.close()
            client.close()
            server.close()

    def _take_drop(self) -> bool:
        """Count one lost reply (False when no longer armed); runs ``on_drop``."""
        with self._lock:
            if self._remaining <= 0:
                return False
            self._remaining -= 1
            self.dropped += 1
            on_drop = self._on_drop
            if self._blackout:  # pooled connections too: nothing reaches Redis any more
                self._refusing = True
                for other in self._open:
                    _cut(other)
        if on_drop is not None:
            on_drop()
        return True


def _cut(connection: socket.socket) -> None:
    """End a relayed connection from another thread (its relay sees the end and closes)."""
    with contextlib.suppress(OSError):
        connection.shutdown(socket.SHUT_RDWR)
