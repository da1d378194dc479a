"""A loopback TCP proxy in front of a real redis-server (or a Sentinel), for faults the store's
clients must survive: a network partition and a lost reply.

* **Partition.** A proxy can *stall* (every connection stays open and nothing moves, as behind a
  dead router) and *drop* (every connection is reset and new ones are refused), then heal.
  A component's :class:`Link` holds one proxy per sentinel and per data node. The component is
  given the proxied sentinels' addresses; the sentinels' replies name the data nodes by their
  real ports, which the link rewrites to its own proxies' ports, so every byte the component
  exchanges with the store (asking Sentinel, then talking to the primary) crosses the link.
* **Lost reply.** A command carrying an armed marker (a script's SHA1, so its EVALSHA) is
  forwarded, the server runs it, and the first bytes of its reply close the client's connection
  instead of reaching it: the script took effect, the caller sees a connection error (and its
  client retries, through the proxy again); or the command is lost before it reaches Redis (it
  never runs). A *blackout* drops the proxy from the next lost reply on (Redis unreachable:
  nothing can be read back).

Threads, not asyncio: the harness is threaded and the traffic is small.
"""

from __future__ import annotations

import contextlib
import hashlib
import socket
import threading
from collections.abc import Callable, Iterable

OPEN = "open"
STALL = "stall"
DROP = "drop"


def script_sha(text: str) -> bytes:
    """The SHA1 redis-py calls a script by (EVALSHA), as the marker to arm."""
    return hashlib.sha1(text.encode()).hexdigest().encode()


class _Armed:
    """Which commands lose their reply (or themselves), how many more, and what then."""

    def __init__(self) -> None:
        self.marker = b""
        self.remaining = 0
        self.on_drop: Callable[[], None] | None = None
        self.blackout = False
        self.requests = False


class _Relay:
    """One client connection and its connection upstream; ``awaiting``: an armed command went
    up, so the next bytes back are its reply (to be lost)."""

    def __init__(self, client: socket.socket, server: socket.socket) -> None:
        self.client, self.server = client, server
        self.awaiting = False


class Proxy:
    """Forwards ``127.0.0.1:port`` to ``127.0.0.1:upstream``; ``rewrite`` replaces byte strings
    in what flows back (the sentinels' replies)."""

    def __init__(self, upstream: int, rewrite: dict[bytes, bytes] | None = None) -> None:
        self.upstream = upstream
        self.rewrite = rewrite or {}
        self.state = OPEN
        self.dropped = 0
        """Replies (or commands) lost so far."""
        self._armed = _Armed()
        self._moving = threading.Event()
        self._moving.set()
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._closed = False
        threading.Thread(target=self._accept, daemon=True, name=f"proxy-{self.port}").start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def set(self, state: str) -> None:
        """``open``, ``stall`` or ``drop`` (resets every connection now)."""
        with self._lock:
            self._set(state)

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
        ``requests`` the commands themselves are lost instead (they never run). With
        ``blackout`` the first loss drops the proxy (:data:`DROP`) until :meth:`reachable`."""
        with self._lock:
            armed = self._armed
            armed.marker, armed.remaining, armed.on_drop = marker, times, on_drop
            armed.blackout, armed.requests = blackout, requests

    def reachable(self) -> None:
        """Accept connections again after a blackout (or a drop), and lose no more replies."""
        with self._lock:
            self._armed.remaining = 0
            self._set(OPEN)

    def close(self) -> None:
        self._closed = True
        self.set(DROP)
        with contextlib.suppress(OSError):
            self._listener.close()

    def _set(self, state: str) -> None:
        self.state = state
        if state == STALL:
            self._moving.clear()
        else:
            self._moving.set()
        if state == DROP:
            for sock in list(self._sockets):
                _reset(sock)
            self._sockets.clear()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self.state == DROP:
                _reset(client)
                continue
            try:
                server = socket.create_connection(("127.0.0.1", self.upstream), timeout=5)
            except OSError:
                _reset(client)
                continue
            server.settimeout(None)
            with self._lock:
                self._sockets.update((client, server))
            relay = _Relay(client, server)
            threading.Thread(target=self._pump, args=(relay, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(relay, True), daemon=True).start()

    def _pump(self, relay: _Relay, replies: bool) -> None:
        source, sink = (relay.server, relay.client) if replies else (relay.client, relay.server)
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                self._moving.wait()  # a stall holds the bytes (and the connection) here
                if self.state == DROP or self._lost(relay, data, replies):
                    break
                if replies:
                    for old, new in self.rewrite.items():
                        data = data.replace(old, new)
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            with self._lock:
                self._sockets.difference_update((source, sink))

    def _lost(self, relay: _Relay, data: bytes, replies: bool) -> bool:
        """Whether ``data`` is lost (the connection then ends): an armed command itself (with
        ``requests``), or the first bytes of its reply (a script Redis did not know, NOSCRIPT,
        is passed back: the client loads it and calls again)."""
        if replies:
            if not relay.awaiting:
                return False
            relay.awaiting = False
            return not data.startswith(b"-NOSCRIPT") and self._take_drop()
        with self._lock:
            armed = self._armed.remaining > 0 and self._armed.marker in data
            requests = self._armed.requests
        if armed and requests:
            return self._take_drop()
        relay.awaiting = armed  # before the command goes up: its reply comes after
        return False

    def _take_drop(self) -> bool:
        """Count one lost reply (False when no longer armed); runs ``on_drop``."""
        with self._lock:
            armed = self._armed
            if armed.remaining <= 0:
                return False
            armed.remaining -= 1
            self.dropped += 1
            on_drop = armed.on_drop
            if armed.blackout:  # pooled connections too: nothing reaches Redis any more
                self._set(DROP)
        if on_drop is not None:
            on_drop()
        return True


def _reset(sock: socket.socket) -> None:
    """Close with RST (SO_LINGER 0), as a dropped route looks to the peer. The shutdown first
    wakes a pump blocked reading it (a close alone leaves a socket another thread is reading
    open, so the connection would live on)."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RD)
    with contextlib.suppress(OSError):
        sock.close()


def _bulk(port: int) -> bytes:
    """A port as a RESP bulk string, the way a sentinel names it in a reply."""
    text = str(port).encode()
    return b"$%d\r\n%s\r\n" % (len(text), text)


class Link:
    """One component's way to the Sentinel group: proxies to its sentinels and data nodes."""

    def __init__(self, name: str, sentinel_ports: Iterable[int], data_ports: Iterable[int]):
        self.name = name
        self.data = {port: Proxy(port) for port in data_ports}
        rewrite = {_bulk(real): _bulk(proxy.port) for real, proxy in self.data.items()}
        self.sentinels = [Proxy(port, rewrite) for port in sentinel_ports]

    def url(self, master: str, query: str = "") -> str:
        hosts = ",".join(f"127.0.0.1:{proxy.port}" for proxy in self.sentinels)
        return f"redis+sentinel://{hosts}/{master}/0{query}"

    @property
    def proxies(self) -> list[Proxy]:
        return [*self.sentinels, *self.data.values()]

    def set(self, state: str) -> None:
        for proxy in self.proxies:
            proxy.set(state)

    def close(self) -> None:
        for proxy in self.proxies:
            proxy.close()
