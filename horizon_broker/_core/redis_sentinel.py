"""Opening the state store (a plain Redis or a Sentinel group), noticing a change of primary, and
writes that wait for replicas (rules F1-F3 of ``docs/design/contract/failover.md``).

Each client opened here carries a :class:`StoreLink`: every new connection reads the server's run
id (one ``INFO server``), so a component can tell, without a round trip of its own, that it now
talks to another Redis process (a promoted replica, a restarted primary) that may lack writes it
saw acknowledged. A client opened with ``strict=True`` also refuses the first command on a new
primary (:class:`PrimaryChanged`, a connection error every caller already retries), so its owner
reconciles before anything else is written there.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Sequence
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from horizon_broker._core.errors import ReplicationShortfall
from horizon_broker._core.store_address import StoreAddress

log = logging.getLogger("horizon.state_store")

CONNECT_TIMEOUT_S = 2.0


class PrimaryChanged(redis.ConnectionError):
    """The connection reached a Redis process other than the one last seen: the caller may
    have lost acknowledged writes, and must check before writing (then retry)."""


class ReplicationStats:
    """What the ``WAIT`` of acknowledged writes found, and how often this process reached
    another Redis process than before (any client of any store), for metrics (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.waits = 0
        self.shortfalls = 0
        self.primary_changes = 0

    def record(self, *, waited: bool = False, short: bool = False, changed: bool = False) -> None:
        with self._lock:
            self.waits += waited
            self.shortfalls += short
            self.primary_changes += changed


STATS = ReplicationStats()


class StoreLink:
    """One client's view of which Redis process it talks to (thread-safe)."""

    def __init__(self, address: StoreAddress, *, strict: bool) -> None:
        self.address = address
        self.strict = strict
        self._lock = threading.Lock()
        self.run_id: str | None = None
        """The run id of the server the newest connection reached (None: none yet)."""
        self.generation = 0
        """How many times the run id changed since the first connection."""

    def on_connect(self, connection: Any) -> None:
        """redis-py's connect hook: the usual handshake, then the server's run id."""
        connection.on_connect()
        if self.address.sentinel:
            # A sentinel that has not heard of a failover yet names the demoted primary, whose
            # reads still answer: never follow a replica.
            connection.send_command("ROLE")
            role = connection.read_response()
            if not role or role[0] not in (b"master", "master"):
                raise redis.ConnectionError("the state store's primary is now a replica")
        connection.send_command("INFO", "server")
        run_id = _field(connection.read_response(), "run_id")
        store = self.address.describe()
        with self._lock:
            # A client opened anew (a follower reconnecting) compares with what this process
            # saw of the same store last.
            previous = self.run_id if self.run_id is not None else _LAST_SEEN.get(store)
            self.run_id = _LAST_SEEN[store] = run_id
            changed = previous is not None and run_id != previous
            if changed:
                self.generation += 1
        if changed:
            STATS.record(changed=True)
            log.warning(
                "state store %s: now talking to Redis %s (was %s): writes acknowledged by the "
                "old one may be lost",
                self.address.describe(),
                run_id,
                previous,
            )
            if self.strict:
                raise PrimaryChanged(f"the state store's primary changed ({previous} -> {run_id})")


_LAST_SEEN: dict[str, str] = {}
"""The run id this process last reached, by store (its address without passwords)."""
_LINKS: weakref.WeakKeyDictionary[redis.Redis, StoreLink] = weakref.WeakKeyDictionary()


def open_store(
    address: StoreAddress, *, socket_timeout: float | None = 5.0, strict: bool = False
) -> redis.Redis:
    """A client of the store's primary, without redis-py's hidden retries (our callers retry
    and notice restarts); through Sentinel when the address names sentinels."""
    link = StoreLink(address, strict=strict)
    common: dict[str, Any] = {
        "socket_timeout": socket_timeout,
        "socket_connect_timeout": CONNECT_TIMEOUT_S,
        "retry": Retry(NoBackoff(), 0),
        "health_check_interval": 0,
        "redis_connect_func": link.on_connect,
    }
    if address.sentinel:
        client = _sentinel_client(address, common)
    else:
        client = redis.Redis.from_url(address.plain_url, **common)
    _LINKS[client] = link
    return client


def _sentinel_client(address: StoreAddress, common: dict[str, Any]) -> redis.Redis:
    from redis.sentinel import Sentinel

    sentinel_kwargs = {
        "socket_timeout": common["socket_timeout"] or CONNECT_TIMEOUT_S,
        "socket_connect_timeout": CONNECT_TIMEOUT_S,
        "password": address.sentinel_password,
    }
    sentinels = Sentinel(list(address.sentinels), sentinel_kwargs=sentinel_kwargs)
    return sentinels.master_for(
        address.master_name,
        db=address.db,
        username=address.username,
        password=address.password,
        ssl=address.tls,
        **common,
    )


def link_of(client: redis.Redis) -> StoreLink | None:
    """The link of a client opened by :func:`open_store` (None for any other client)."""
    return _LINKS.get(client)


def primary_generation(client: redis.Redis) -> int:
    """How many times the client's primary changed (0 for a client not opened here)."""
    link = _LINKS.get(client)
    return link.generation if link is not None else 0


def primary_run_id(client: redis.Redis) -> str | None:
    link = _LINKS.get(client)
    return link.run_id if link is not None else None


def call_acknowledged(client: redis.Redis, script: Any, args: Sequence[str], what: str) -> Any:
    """Run a registered script; with ``wait_replicas``, also ``WAIT`` on the same connection
    (rule F2) and raise :class:`ReplicationShortfall` when too few replicas confirm."""
    link = _LINKS.get(client)
    if link is None or link.address.wait_replicas <= 0:
        return script(args=list(args))
    wanted, timeout_ms = link.address.wait_replicas, link.address.wait_timeout_ms
    pipe = client.pipeline(transaction=False)
    script(args=list(args), client=pipe)
    pipe.execute_command("WAIT", wanted, timeout_ms)
    reply, confirmed = pipe.execute()
    short = int(confirmed) < wanted
    STATS.record(waited=True, short=short)
    if short:
        raise ReplicationShortfall(
            f"state store: {what} confirmed by {int(confirmed)} of {wanted} replicas within "
            f"{timeout_ms} ms"
        )
    return reply


def _field(info: Any, name: str) -> str:
    text = info.decode() if isinstance(info, bytes) else str(info)
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key == name:
            return value.strip()
    return ""
