"""The ``horizon`` command line: run the broker, query it, inspect timelines, watermarks, locks.

Client commands talk to ``--target`` (default ``$HORIZON_TARGET`` or 127.0.0.1:50051; several
brokers separated by commas, tried in turn when one goes away) with ``--token`` (default
``$HORIZON_TOKEN``); each prints readable tables, or JSON with ``--json``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from horizon_broker._core.errors import HorizonError

if TYPE_CHECKING:
    from types import ModuleType

    from rich.console import Console

    from horizon_broker.broker.api.server import BrokerServer
    from horizon_broker.broker.config import BrokerConfig
    from horizon_broker.client import HorizonClient
    from horizon_broker.watermark.embedded_redis import EmbeddedRedis

DEFAULT_TARGET = "127.0.0.1:50051"
EXIT_ERROR = 1
EXIT_USAGE = 2


def _client_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--target",
        default=os.environ.get("HORIZON_TARGET", DEFAULT_TARGET),
        help="broker address host:port, or several separated by commas (the next is tried "
        "when one is unavailable); or HORIZON_TARGET",
    )
    parser.add_argument(
        "--token", default=os.environ.get("HORIZON_TOKEN"), help="bearer token (or HORIZON_TOKEN)"
    )
    parser.add_argument("--tls", action="store_true", help="connect with TLS (system roots)")
    parser.add_argument("--ca", help="PEM file of the root certificate(s) to trust (implies TLS)")
    parser.add_argument("--timeout", type=float, default=None, help="seconds per call")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="horizon", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser(
        "demo", help="run the end-to-end demo (arguments go to python -m demo)", add_help=False
    )
    _add_serve(sub)
    _add_read_commands(sub)
    _add_pin(sub)
    _add_inspection_commands(sub)
    sub.add_parser(
        "ingest", help="run the ingestion job (arguments go to the ingest CLI)", add_help=False
    )
    sub.add_parser(
        "compact", help="compact a table (arguments go to the compaction CLI)", add_help=False
    )
    sub.add_parser(
        "table", help="change a registered table's schema (horizon table alter)", add_help=False
    )
    config = sub.add_parser("config", help="the configuration files' schemas")
    config.add_argument("action", choices=["schema"], help="schema: print a file's JSON Schema")
    config.add_argument("file", choices=["broker", "table", "server"], help="which file")
    return parser


Subcommands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def _add_serve(sub: Subcommands) -> None:
    serve = sub.add_parser("serve", help="run the broker")
    serve.add_argument("--config", help="TOML configuration file (or HORIZON_CONFIG)")
    serve.add_argument("--listen", help="override [server].listen, e.g. 127.0.0.1:50051")
    serve.add_argument("--redis", help="override [state].redis_url")
    serve.add_argument(
        "--embedded-redis",
        action="store_true",
        help="start a private redis-server on a free loopback port (stopped with the broker) "
        "and print its URL for ingestion servers",
    )
    serve.add_argument("-v", "--verbose", action="store_true")


def _add_read_commands(sub: Subcommands) -> None:
    query = sub.add_parser("query", help="run a SELECT and print its rows")
    query.add_argument("sql", help="one Spark SQL SELECT over registered tables")
    query.add_argument("--max-rows", type=int, default=0, help="fail beyond this many rows")
    _read_options(query)
    _client_options(query)

    explain = sub.add_parser("explain", help="show the rewritten SQL, snapshot and segments")
    explain.add_argument("sql", help="the SELECT to explain (it is not run)")
    explain.add_argument("--spark-plan", action="store_true", help="include Spark's plan")
    _read_options(explain)
    _client_options(explain)

    rewrite = sub.add_parser("rewrite", help="passthrough: rewritten SQL and file lists (JSON)")
    rewrite.add_argument("sql", help="the SELECT to rewrite for your own Spark (it is not run)")
    rewrite.add_argument(
        "--pin-lease", type=float, default=0.0, help="also pin what it reads for SECONDS"
    )
    _read_options(rewrite)
    _client_options(rewrite)


def _add_pin(sub: Subcommands) -> None:
    pin = sub.add_parser(
        "pin", help="pin a snapshot of tables (retention and file deletion wait for it)"
    )
    pin.add_argument("tables", nargs="*", help="the tables to pin at one snapshot")
    pin.add_argument("--snapshot", type=int, help="the snapshot (default: their lowest LWM)")
    pin.add_argument("--lease", type=float, default=300.0, help="seconds it holds (default 300)")
    pin.add_argument("--renew", metavar="PIN_ID", help="renew this pin for --lease seconds")
    pin.add_argument("--release", metavar="PIN_ID", help="release this pin")
    pin.add_argument(
        "--min-snapshot",
        action="append",
        default=[],
        help="a snapshot token to wait for first (repeat for several)",
    )
    _client_options(pin)


def _add_inspection_commands(sub: Subcommands) -> None:
    timeline = sub.add_parser("timeline", help="show a table's segment timeline")
    timeline.add_argument("table")
    timeline.add_argument("--interval", help="ISO-8601 start/end, e.g. 2026-01-01/2026-02-01")
    timeline.add_argument(
        "--overshadowed", action="store_true", help="also list overshadowed groups"
    )
    timeline.add_argument(
        "--picture", type=Path, help="write a picture of the timeline to this .svg file"
    )
    _client_options(timeline)

    watermarks = sub.add_parser("watermarks", help="show a table's low-watermark breakdown")
    watermarks.add_argument("table")
    _client_options(watermarks)

    locks = sub.add_parser("locks", help="show the locks ingestion and compaction jobs hold")
    locks.add_argument("table", nargs="?", default="", help="one table (default: every table)")
    _client_options(locks)

    tables = sub.add_parser("tables", help="list the tables you may read")
    _client_options(tables)

    _add_why(sub)
    _add_subscribe(sub)

    queries = sub.add_parser("queries", help="show running and recent queries")
    queries.add_argument("--running", action="store_true", help="only the running ones")
    _client_options(queries)


def _add_subscribe(sub: Subcommands) -> None:
    subscribe = sub.add_parser(
        "subscribe",
        help="a standing query: its result, then its changes as its tables move (Ctrl-C ends)",
        description="Prints the query's result at the start snapshot, then, each time the "
        "low-watermark of its tables moves, the rows that changed (with _change_type: insert, "
        "delete, update_before, update_after) and the token to resume from.",
    )
    subscribe.add_argument(
        "sql", help="the SELECT to follow (VERSION AS OF / TIMESTAMP AS OF: where to start)"
    )
    subscribe.add_argument(
        "--resume", default="", help="go on after the message that printed this resume token"
    )
    subscribe.add_argument(
        "--max-rows-per-message", type=int, default=0, help="change rows per message (0: 10,000)"
    )
    _client_options(subscribe)


def _add_why(sub: Subcommands) -> None:
    why = sub.add_parser(
        "why",
        help="why a key's row is (not) in a table: every stored version and its verdict",
        description="Every stored version of one key (each copy in each segment) with its "
        "validFrom/validUntil, segment, file and atomic update group, and at the snapshot the "
        "one visible version or why each other is not read. Needs the inspect grant.",
    )
    why.add_argument("table")
    why.add_argument(
        "key",
        help="the key: the value of a one-column primary key (42, alice), or, for any key, a "
        'JSON object by key column (\'{"region": "eu", "id": 7}\') or a JSON list in '
        "primary-key order ('[\"eu\", 7]')",
    )
    why.add_argument(
        "--at",
        default="",
        help="the snapshot: a number (an HLC, as VERSION AS OF) or a snapshot token "
        "(default: the one a query reads now, the table's LWM)",
    )
    _client_options(why)


def _read_options(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--min-snapshot",
        action="append",
        default=[],
        help="a snapshot token: read at or after it (waits); repeat for several tokens",
    )
    command.add_argument("--max-staleness", type=float, help="refuse a snapshot older than SECONDS")
    command.add_argument("--pin", default="", help="read at this snapshot pin")
    command.add_argument("--no-cache", action="store_true", help="skip the result cache")


def _read_controls(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "min_snapshot": args.min_snapshot,
        "max_staleness": args.max_staleness,
        "pin": args.pin or None,
        "cache": not args.no_cache,
    }


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "ingest":
        return _ingest(argv[1:])
    if argv and argv[0] == "demo":
        return _demo(argv[1:])
    if argv and argv[0] == "compact":
        from horizon_broker.compaction.cli import main_compact

        return int(main_compact(argv[1:]) or 0)
    if argv and argv[0] == "table":
        from horizon_broker.ingest.table_cli import main_table

        return int(main_table(argv[1:]) or 0)
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        return _serve(args)
    if args.command == "config":
        return _config_schema(args.file)
    return _client_command(args)


def _config_schema(file: str) -> int:
    """``horizon config schema broker|table|server``: the file's JSON Schema, for editors."""
    from horizon_broker.broker.config_reference import schema

    print(json.dumps(schema(file), indent=2))
    return 0


def _demo(argv: list[str]) -> int:
    """The demo drives the product like a user, from its own package above the product: it
    runs as its own program (``python -m demo``) from a Horizon checkout, and is not installed
    with the package (so no other ``demo`` on the path is ever started in its place)."""
    import subprocess
    from pathlib import Path

    if not (Path.cwd() / "demo" / "__main__.py").is_file():
        print(
            "horizon demo: the demo runs from a Horizon checkout (run `make demo` in it); "
            "it is not installed with the package",
            file=sys.stderr,
        )
        return EXIT_USAGE
    return subprocess.call([sys.executable, "-m", "demo", *argv])


def _ingest(argv: list[str]) -> int:
    if importlib.util.find_spec("horizon_broker.ingest.cli") is None:
        print(
            "horizon ingest: the ingestion CLI (horizon_broker/ingest/cli.py) is not installed",
            file=sys.stderr,
        )
        return EXIT_USAGE
    from horizon_broker.ingest.cli import main_ingest

    return int(main_ingest(argv) or 0)


def _serve(args: argparse.Namespace) -> int:
    from horizon_broker._core.heap import settle_startup_heap
    from horizon_broker.broker.api.server import BrokerServer
    from horizon_broker.broker.config import load_config
    from horizon_broker.broker.observe.wiring import configure_broker_logging

    embedded = None
    try:
        config = _with_listen(load_config(args.config), args.listen)
        if args.redis and args.embedded_redis:
            raise _usage("give --redis or --embedded-redis, not both")
        if args.embedded_redis:
            embedded = _start_embedded_redis()
            args.redis = embedded.url
        config = _with_redis(config, args.redis)
        configure_broker_logging(config, verbose=args.verbose)
        server = BrokerServer(config).start()
    except HorizonError as error:
        print(f"horizon serve: {error}", file=sys.stderr)
        if embedded is not None:
            embedded.close()
        return EXIT_ERROR
    settle_startup_heap()
    _print_endpoints(server, config)

    def shutdown(signum: int, frame: Any) -> None:
        server.stop()

    signal.signal(signal.SIGTERM, shutdown)
    signal.signal(signal.SIGINT, shutdown)
    try:
        server.wait()
        server.stop()
    finally:
        if embedded is not None:
            embedded.close()
    return 0


def _with_listen(config: BrokerConfig, listen: str | None) -> BrokerConfig:
    """The configuration with ``--listen`` in place of the file's ``[server].listen``."""
    from dataclasses import replace

    if not listen:
        return config
    return replace(config, server=replace(config.server, listen=listen))


def _with_redis(config: BrokerConfig, redis_url: str | None) -> BrokerConfig:
    """The configuration with ``--redis`` (or the embedded one's URL) in place of the file's."""
    from dataclasses import replace

    if not redis_url:
        return config
    return replace(config, state=replace(config.state, redis_url=redis_url))


def _start_embedded_redis() -> EmbeddedRedis:
    from horizon_broker.watermark.embedded_redis import EmbeddedRedis

    embedded = EmbeddedRedis().start()
    print(
        f"horizon state store (embedded, stops with the broker): {embedded.url}\n"
        f"  ingest into it with: horizon ingest --redis {embedded.url} ...",
        flush=True,
    )
    return embedded


def _print_endpoints(server: BrokerServer, config: BrokerConfig) -> None:
    """Where the broker answers: gRPC, then Flight SQL, metrics and the console when on."""
    print(f"horizon broker listening on {server.target}", flush=True)
    clock = server.startup  # from start()'s beginning, at epoch began_at (bench/broker_restart.py)
    print(f"start-up (began_at {clock.began_at:.3f}): {clock.describe()}", flush=True)
    if server.flight_target:
        scheme = "grpc+tls" if config.server.tls else "grpc"
        print(f"Arrow Flight SQL on {scheme}://{server.flight_target}", flush=True)
    if server.observer is not None and server.observer.metrics_url:
        print(f"metrics on {server.observer.metrics_url}", flush=True)
    if server.console is not None:
        print(f"web console on {server.console.url}", flush=True)


def _client_command(args: argparse.Namespace) -> int:
    from rich.console import Console

    from horizon_broker import render
    from horizon_broker.client import connect

    console = Console()
    try:
        with connect(
            args.target,
            token=args.token,
            tls=args.tls,
            root_certificates=args.ca,
            timeout=args.timeout,
        ) as client:
            output = _run(client, args, console, render)
    except HorizonError as error:
        if args.json:
            print(
                json.dumps(
                    {"error": type(error).__name__, "code": error.code.value, "message": str(error)}
                )
            )
        else:
            Console(stderr=True).print(f"[red]{error.code.value}[/red]: {error}", highlight=False)
        return EXIT_ERROR
    if output is not None:
        print(render.dumps(output))
    return 0


def _run(
    client: HorizonClient, args: argparse.Namespace, console: Console, render: ModuleType
) -> Any:
    """Run one client command; returns the JSON to print (``--json``) or None after printing."""
    return _CLIENT_COMMANDS[args.command](client, args, console, render)


def _query_command(
    client: HorizonClient, args: argparse.Namespace, console: Console, render: ModuleType
) -> Any:
    result = client.execute(args.sql, max_rows=args.max_rows, **_read_controls(args))
    if args.json:
        return render.result_json(result)
    render.print_result(console, result)
    return None


def _explain_command(
    client: HorizonClient, args: argparse.Namespace, console: Console, render: ModuleType
) -> Any:
    explain = client.explain(args.sql, include_spark_plan=args.spark_plan, **_read_controls(args))
    if args.json:
        return render.to_dict(explain)
    render.print_explain(console, explain)
    return None


def _rewrite_command(
    client: HorizonClient, args: argparse.Namespace, console: Console, render: ModuleType
) -> Any:
    return render.to_dict(
        client.rewrite(args.sql, pin_lease=args.pin_lease, **_read_controls(args))
    )


def _timeline_command(
    client: HorizonClient, args: argparse.Namespace, console: Console, render: ModuleType
) -> Any:
    timeline = client.timeline(
        args.table, interval=args.interval, include_overshadowed=args.overshadowed
    )
    if args.picture is not None:
        if args.picture.suffix.lower() != ".svg":
            raise _usage("--picture writes SVG: give a file name ending in .svg")
        from horizon_broker.broker.api.timeline_picture import timeline_svg

        args.picture.write_text(timeline_svg(timeline))
    if args.json:
        return render.to_dict(timeline)
    render.print_timeline(console, timeline)
    if args.picture is not None:
        console.print(f"[dim]picture written to {args.picture}[/dim]")
    return None


def _watermarks_command(
    client: HorizonClient, args: argparse.Namespace, console: Console, render: ModuleType
) -> Any:
    marks = client.watermarks(args.table)
    if args.json:
        return render.to_dict(marks)
    render.print_watermarks(console, marks)
    return None


def _locks_command(
    client: HorizonClient, args: argparse.Namespace, console: Console, render: ModuleType
) -> Any:
    held = client.locks(args.table)
    if args.json:
        return render.to_dict(held)
    render.print_locks(console, held, table=args.table)
    return None


def _tables_command(
    client: HorizonClient, args: argparse.Namespace, console: Console, render: ModuleType
) -> Any:
    tables = client.tables()
    if args.json:
        return [render.to_dict(table) for table in tables]
    render.print_tables(console, tables)
    return None


def _queries_command(
    client: HorizonClient, args: argparse.Namespace, console: Console, render: ModuleType
) -> Any:
    found = client.queries(running_only=args.running)
    if args.json:
        return [render.to_dict(query) for query in found]
    render.print_queries(console, found)
    return None


def _why_command(
    client: HorizonClient, args: argparse.Namespace, console: Console, render: ModuleType
) -> Any:
    answer = client.explain_key(args.table, args.key, at=args.at or None)
    if args.json:
        return render.to_dict(answer)
    render.print_key_explanation(console, answer)
    return None


def _subscribe_command(
    client: HorizonClient, args: argparse.Namespace, console: Console, render: ModuleType
) -> Any:
    """Print each message as it comes (one JSON line each with --json)."""
    messages = client.subscribe(
        args.sql, resume_token=args.resume, max_rows_per_message=args.max_rows_per_message
    )
    for message in messages:
        if args.json:
            print(render.dumps(render.subscription_json(message)), flush=True)
            continue
        span = f"{message.from_snapshot} -> " if message.kind == "delta" else ""
        title = f"{message.kind} {span}{message.to_snapshot} ({message.strategy})"
        console.print(render.result_table(message.rows, title=title))
        if message.resume_token:
            console.print(f"[dim]resume token: {message.resume_token}[/dim]", highlight=False)
    return None


def _pin_command(
    client: HorizonClient, args: argparse.Namespace, console: Console, render: ModuleType
) -> Any:
    if args.release:
        released = client.release_pin(args.release)
        if args.json:
            return {"pin_id": args.release, "released": released}
        state = "released" if released else "was already gone (expired or released)"
        console.print(f"pin {args.release} {state}")
        return None
    if args.renew:
        pin = client.renew_pin(args.renew, lease=args.lease)
    elif not args.tables:
        raise _usage("name the tables to pin, or give --renew PIN_ID or --release PIN_ID")
    else:
        held = client.pin(
            args.tables,
            snapshot=args.snapshot,
            lease=args.lease,
            min_snapshot=args.min_snapshot,
            renew=False,
        )
        pin = held.pin
    if args.json:
        return render.to_dict(pin)
    render.print_pins(console, [pin])
    console.print(
        f"query it with --pin {pin.pin_id}; release it with horizon pin --release {pin.pin_id}",
        highlight=False,
    )
    return None


_CLIENT_COMMANDS: dict[
    str, Callable[[HorizonClient, argparse.Namespace, Console, ModuleType], Any]
] = {
    "query": _query_command,
    "explain": _explain_command,
    "rewrite": _rewrite_command,
    "pin": _pin_command,
    "subscribe": _subscribe_command,
    "timeline": _timeline_command,
    "watermarks": _watermarks_command,
    "locks": _locks_command,
    "tables": _tables_command,
    "queries": _queries_command,
    "why": _why_command,
}
"""Each client command of the parser, by name."""


def _usage(message: str) -> HorizonError:
    from horizon_broker._core.errors import InvalidArgument

    return InvalidArgument(message)


if __name__ == "__main__":
    sys.exit(main())
