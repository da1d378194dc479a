"""The partition, lost-reply and clock faults do what they claim: a stalled link hangs (the
client times out on an open connection), a dropped link resets, a healed link carries traffic
again; a component given a link's Sentinel URL reaches the primary through the link (so a
partition cuts it off whole); an armed script runs but its caller loses the reply (or the call
itself is lost, or the store goes dark until reachable again); a skewed process's wall clock
moves by the offset written for it."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from chaos.proxy import DROP, OPEN, STALL, Link, Proxy, script_sha
from chaos.sentinel_group import MASTER, SentinelGroup
from chaos.skewed import skewed_command, write_offset
from horizon_broker._core.redis_calls import connect


def test_a_stalled_proxy_hangs_a_dropped_one_resets_and_a_healed_one_carries(
    redis_server,
) -> None:
    proxy = Proxy(int(redis_server.url.rsplit(":", 1)[1].split("/")[0]))

    def client_of_proxy() -> redis.Redis:
        return redis.Redis(
            host="127.0.0.1", port=proxy.port, socket_timeout=0.5, retry=Retry(NoBackoff(), 0)
        )

    client = client_of_proxy()
    try:
        assert client.ping()
        proxy.set(STALL)
        with pytest.raises(redis.TimeoutError):
            client.ping()  # the connection stays open, nothing comes back
        proxy.set(DROP)
        with pytest.raises(redis.ConnectionError):
            client_of_proxy().ping()
        proxy.set(OPEN)
        assert client.ping()
    finally:
        client.close()
        proxy.close()


def test_a_drop_resets_a_connection_waiting_on_a_reply(redis_server) -> None:
    """A blocking read (as a broker's follower makes) is reset by a drop, not left waiting."""
    proxy = Proxy(redis_server.port)
    client = redis.Redis.from_url(proxy.url, socket_timeout=10, retry=Retry(NoBackoff(), 0))
    outcome: list[object] = []

    def wait_for_an_item() -> None:
        try:
            outcome.append(client.blpop(["nothing-comes"], timeout=3))
        except redis.ConnectionError as error:
            outcome.append(error)

    try:
        assert client.ping()
        waiting = threading.Thread(target=wait_for_an_item)
        waiting.start()
        time.sleep(0.5)  # the BLPOP is in Redis
        proxy.set(DROP)
        waiting.join()
        assert len(outcome) == 1 and isinstance(outcome[0], redis.ConnectionError), outcome
    finally:
        client.close()
        proxy.close()


INCREMENT = "return redis.call('INCR', KEYS[1])"


def test_an_armed_script_runs_but_its_reply_is_lost_or_it_is_lost_itself(redis_server) -> None:
    proxy = Proxy(redis_server.port)
    client = redis.Redis.from_url(proxy.url, socket_timeout=2, retry=Retry(NoBackoff(), 0))
    increment = client.register_script(INCREMENT)
    dropped: list[int] = []
    try:
        assert increment(keys=["n"]) == 1
        proxy.lose_replies(script_sha(INCREMENT), on_drop=lambda: dropped.append(proxy.dropped))
        with pytest.raises(redis.ConnectionError):
            increment(keys=["n"])
        assert (client.get("n"), dropped) == (b"2", [1]), "it ran; only its reply was lost"
        proxy.lose_replies(script_sha(INCREMENT), requests=True)
        with pytest.raises(redis.ConnectionError):
            increment(keys=["n"])
        assert client.get("n") == b"2", "the call itself was lost: it never ran"
        proxy.lose_replies(script_sha(INCREMENT), blackout=True)
        with pytest.raises(redis.ConnectionError):
            increment(keys=["n"])
        with pytest.raises(redis.ConnectionError):
            client.get("n")  # dark: every connection refused
        proxy.reachable()
        assert (client.get("n"), proxy.dropped) == (b"3", 3)
    finally:
        client.close()
        proxy.close()


def test_a_component_on_a_link_reaches_the_primary_through_it_and_loses_it_when_cut() -> None:
    group = SentinelGroup().start()
    link = Link("server", group.sentinel_ports, group.data_ports)
    try:
        store = connect(link.url(MASTER), socket_timeout=0.5)
        store.set("k", "v")
        _host, port = store.connection_pool.get_master_address()  # type: ignore[attr-defined]
        assert port == link.data[group.primary_port()].port  # the proxy, not the node itself
        link.set(STALL)
        with pytest.raises((redis.TimeoutError, redis.ConnectionError)):
            store.get("k")
        link.set(OPEN)
        assert store.get("k") == b"v"
        store.close()
    finally:
        link.close()
        group.close()


def test_a_skewed_process_reads_the_offset_written_for_it(tmp_path: Path) -> None:
    offset_file = tmp_path / "skew"
    write_offset(offset_file, -3600.0)
    script = tmp_path / "print_clock.py"
    script.write_text("import time\nprint(time.time(), time.time_ns() / 1e9)\n")
    command = skewed_command(offset_file, [sys.executable, "-m", "print_clock"])
    before = time.time()
    done = subprocess.run(
        command, capture_output=True, text=True, check=True, timeout=60,
        cwd=tmp_path, env={"PYTHONPATH": f"{Path.cwd()}:{tmp_path}"},
    )  # fmt: skip
    after = time.time()
    seen, seen_ns = (float(v) for v in done.stdout.split())
    # The child read its clock between our two readings, moved by the offset written for it.
    for clock in (seen, seen_ns):
        assert before - 3600.0 <= clock <= after - 3600.0, done.stdout
