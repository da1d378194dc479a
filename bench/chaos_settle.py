"""Waiting for a chaos run's writes to be visible at the LWM, and saying why when they are not.

A run that does not settle within the timeout raises :class:`NotSettled`, whose message names
what was still missing: the files no server acknowledged, the acknowledged batches above their
table's LWM (table, file, commit timestamp, server, with a few of their keys), each table's LWM
and its partitions' as every broker saw them at the deadline, which processes were alive,
paused or held by a fault, the state of each component's link to the store, and which node the
sentinels named primary. The same report, longer, goes to ``<work>/not-settled.json``.
"""

from __future__ import annotations

import json
import time
from typing import Any

NAMED = 8
"""Batches and files named in the message (the file has them all)."""
TAIL = 20
"""Lines of each process's log in the file (the message has the last two)."""


class NotSettled(RuntimeError):
    """The writes were not all visible at the LWM in time; the message says which, and why."""


def wait_for_writes(client: Any, writer: Any, timeout: float, cluster: Any = None) -> int:
    """Wait until every file written so far is acknowledged and the LWM of every table covers
    it; returns the highest commit timestamp awaited. ``client`` may name several brokers: any
    that answers will do. :class:`NotSettled` after ``timeout`` (with ``cluster``: what each
    process and broker was doing)."""
    from chaos.cluster import TABLES
    from chaos.workload import acknowledged

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        writes = writer.writes()
        acked = acknowledged(writer.work)
        if set(writer.files) <= acked and writes:
            high = max(write.commit_ts for write in writes)
            try:
                lwms = [client.watermarks(table).lwm for table in TABLES]
            except Exception:
                lwms = [0]
            if min(lwms) >= high:
                return high
        time.sleep(0.5)
    message = f"the writes were not all visible at the LWM within {timeout} s"
    try:  # the report must never hide the failure it explains
        report = unsettled(writer, cluster, TABLES)
        path = writer.work / "not-settled.json"
        path.write_text(json.dumps(report, indent=1, default=str))
        message += f" (everything in {path}):\n{summary(report)}"
    except Exception as error:
        message += f" (and the report of why failed: {type(error).__name__}: {error})"
    raise NotSettled(message)


def unsettled(writer: Any, cluster: Any, tables: tuple[str, ...]) -> dict[str, Any]:
    """What a run that did not settle was waiting for, and the state of everything it waits on."""
    from chaos.workload import _acks

    acks = _acks(writer.work)
    acked = {ack["file"] for ack in acks}
    report: dict[str, Any] = {
        "files_not_acknowledged": [
            {"file": file, "table": writer.files[file][0], "server": writer.owners_of.get(file)}
            for file in writer.files
            if file not in acked
        ],
        "watermarks": _watermarks(cluster, tables) if cluster is not None else {},
    }
    best = _best_lwms(report["watermarks"], tables)
    report["batches_above_lwm"] = [
        {
            "table": ack.get("table"),
            "file": ack["file"],
            "base": ack.get("base"),
            "server": writer.owners_of.get(ack["file"]),
            "keys": sorted({_key(row) for row in writer.files.get(ack["file"], ("", []))[1]})[:6],
            "lwm_seen": best.get(str(ack.get("table"))),
        }
        for ack in acks
        if ack.get("base") is not None and ack["base"] > best.get(str(ack.get("table")), 0)
    ]
    if cluster is not None:
        report["processes"] = _processes(cluster)
        report["links"] = {name: link.proxies[0].state for name, link in cluster.links.items()}
        report["primary"] = _primary(cluster)
        report["foreign_sentinels"] = foreign_sentinels_or_why(cluster)
        report["log_tails"] = {
            path.stem: path.read_text(errors="replace").splitlines()[-TAIL:]
            for path in sorted(cluster.logs.glob("*.log"))
        }
    return report


def summary(report: dict[str, Any]) -> str:
    """The report in a few lines (what a failed test shows)."""
    lines = []
    missing = report["files_not_acknowledged"]
    lines.append(f"files not acknowledged: {len(missing)} {missing[:NAMED]}")
    above = report["batches_above_lwm"]
    lines.append(f"acknowledged batches above the LWM: {len(above)}")
    lines += [
        f"  {b['table']} base {b['base']} by {b['server']} keys {b['keys']} ({b['file']})"
        for b in above[:NAMED]
    ]
    for broker, tables in report["watermarks"].items():
        for table, seen in tables.items():
            lines.append(f"{broker} {table}: {_one_line(seen)}")
    lines.append(f"processes: {report.get('processes', '-')}")
    lines.append(f"links: {report.get('links', '-')}; primary: {report.get('primary', '-')}")
    lines.append(f"sentinels not the run's, on its nodes: {report.get('foreign_sentinels', '-')}")
    for name, tail in report.get("log_tails", {}).items():
        lines += [f"{name}| {line[:200]}" for line in tail[-2:]]
    return "\n".join(lines)


def _watermarks(cluster: Any, tables: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """Each table's LWM and its partitions', as each broker reports them (or its error)."""
    from horizon_broker.client import connect

    seen: dict[str, dict[str, Any]] = {}
    for name, target in zip(cluster.brokers, cluster.targets, strict=True):
        seen[name] = {}
        with connect(target, timeout=5.0) as client:
            for table in tables:
                try:
                    seen[name][table] = _watermark(client.watermarks(table))
                except Exception as error:
                    seen[name][table] = {"error": f"{type(error).__name__}: {error}"[:200]}
    return seen


def _watermark(reply: Any) -> dict[str, Any]:
    return {
        "lwm": reply.lwm if reply.HasField("lwm") else None,
        "laggard": f"{reply.laggard.server} p{reply.laggard.partition}"
        if reply.HasField("laggard")
        else None,
        "held_segments": reply.held_segments,
        "queries_blocked": reply.queries_blocked,
        "stale_servers": list(reply.stale_servers),
        "regressions": [r.detail or f"{r.server} p{r.partition}" for r in reply.regressions],
        "partitions": [
            f"p{p.partition} {p.server} {'live' if p.live else 'not live'} state {p.state} "
            f"ingested {p.ingested} applied {p.applied} lwm {p.watermark}"
            for p in reply.partitions
        ],
        "servers": [
            f"{s.server} {s.status} hb age {s.heartbeat_age_seconds:.1f} s" for s in reply.servers
        ],
    }


def _best_lwms(watermarks: dict[str, dict[str, Any]], tables: tuple[str, ...]) -> dict[str, int]:
    """Each table's highest LWM any broker reported (what the wait needed to pass)."""
    best: dict[str, int] = {}
    for by_table in watermarks.values():
        for table in tables:
            lwm = by_table.get(table, {}).get("lwm")
            if lwm is not None:
                best[table] = max(best.get(table, 0), lwm)
    return best


def _processes(cluster: Any) -> dict[str, str]:
    return {
        name: ("paused" if process.paused else "alive" if process.alive else "down")
        for name, process in [*cluster.servers.items(), *cluster.brokers.items()]
    }


def foreign_sentinels(group: Any) -> dict[int, list[str]]:
    """Sentinels connected to the run's data nodes that are not the run's own, by node port
    (their ids' first 8 characters): a sentinel left over from another group, watching a
    master of the same name at a port the run now uses, can reconfigure the run's nodes."""
    ours = set()
    for port in group.sentinel_ports:
        with group.client(port) as sentinel:
            ours.add(sentinel.execute_command("SENTINEL", "MYID").decode()[:8])
    found: dict[int, list[str]] = {}
    for port in group.data_ports:
        with group.client(port) as node:
            names = {str(c.get("name", "")) for c in node.client_list()}
        ids = {n.split("-")[1] for n in names if n.startswith("sentinel-") and n.count("-") >= 2}
        if ids - ours:
            found[port] = sorted(ids - ours)
    return found


def foreign_sentinels_or_why(cluster: Any) -> Any:
    """:func:`foreign_sentinels` of the run's group, or why they could not be listed."""
    try:
        return foreign_sentinels(cluster.group)
    except Exception as error:
        return f"unknown ({type(error).__name__}: {error})"[:200]


def _primary(cluster: Any) -> str:
    group = cluster.group
    try:
        primary = group.primary_port()
        replicated = group.replicated()
    except Exception as error:
        return f"unknown ({type(error).__name__}: {error})"[:200]
    return f"port {primary} of {group.data_ports}, replica in sync: {replicated}"


def _key(row: dict[str, Any]) -> Any:
    return row.get("account", row.get("key"))


def _one_line(seen: dict[str, Any]) -> str:
    if "error" in seen:
        return seen["error"]
    return (
        f"lwm {seen['lwm']} laggard {seen['laggard']} held {seen['held_segments']} "
        f"blocked {seen['queries_blocked']} stale {seen['stale_servers']} "
        f"regressions {seen['regressions'][:2]} partitions {seen['partitions']}"
    )
