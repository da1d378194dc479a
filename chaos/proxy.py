"""A network partition on loopback: TCP proxies between one component and the Redis Sentinel
group, which can *stall* (every connection stays open and nothing moves, as behind a dead
router) and *drop* (every connection is reset and new ones are refused), then heal.

A component's :class:`Link` holds one proxy per sentinel and per data node. The component is
given the proxied sentinels' addresses; the sentinels' replies name the data nodes by their real
ports, which the link rewrites to its own proxies' ports, so every byte the component exchanges
with the store (asking Sentinel, then talking to the primary) crosses the link. Threads, not
asyncio: the harness is threaded and the traffic is small.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterable

OPEN = "open"
STALL = "stall"
DROP = "drop"


class Proxy:
    """Forwards ``127.0.0.1:port`` to ``127.0.0.1:upstream``; ``rewrite`` replaces byte strings
    in what flows back (the sentinels' replies)."""

    def __init__(self, upstream: int, rewrite: dict[bytes, bytes] | None = None) -> None:
        self.upstream = upstream
        self.rewrite = rewrite or {}
        self.state = OPEN
        self._moving = threading.Event()
        self._moving.set()
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._closed = False
        threading.Thread(target=self._accept, daemon=True, name=f"proxy-{self.port}").start()

    def set(self, state: str) -> None:
        """``open``, ``stall`` or ``drop`` (resets every connection now)."""
        with self._lock:
            self.state = state
            if state == STALL:
                self._moving.clear()
            else:
                self._moving.set()
            if state == DROP:
                for sock in list(self._sockets):
                    _reset(sock)
                self._sockets.clear()

    def close(self) -> None:
        self._closed = True
        self.set(DROP)
        with contextlib.suppress(OSError):
            self._listener.close()

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
            threading.Thread(target=self._pump, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, True), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, replies: bool) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                self._moving.wait()  # a stall holds the bytes (and the connection) here
                if self.state == DROP:
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


def _reset(sock: socket.socket) -> None:
    """Close with RST (SO_LINGER 0), as a dropped route looks to the peer."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
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
