"""``horizon table alter``: change a registered table's schema (one new schema version).

    horizon table alter accounts --redis redis://127.0.0.1:6379/0 \\
        --add-column "tier string default 'basic'" --widen "balance decimal(20,2)" \\
        --drop-column legacy

Every change of one call takes effect together, at one commit timestamp above every snapshot
already read (printed); a change already in effect is a no-op, so a retried call is harmless.
Allowed: adding a nullable column (optional default), widening ``int`` to ``bigint``, ``float``
to ``double`` or a decimal's precision (same scale), dropping a column from reads. Running
ingestion servers write the new schema from their next batch. See docs/guides/schema-changes.md.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

from horizon_broker._core.commands import run_command
from horizon_broker._core.errors import InvalidArgument
from horizon_broker._core.hlc import format_snapshot
from horizon_broker._core.store_address import STORE_URL_HELP
from horizon_broker.watermark.schema_rules import DropColumn, SchemaChange, parse_add, parse_widen
from horizon_broker.watermark.schema_store import alter_table


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="horizon table", description=__doc__.split("\n")[0])
    parser.add_argument("action", choices=["alter"], help="alter: add, widen or drop columns")
    parser.add_argument("table", help="the registered table's name")
    parser.add_argument(
        "--redis",
        required=True,
        help=STORE_URL_HELP,
    )
    parser.add_argument("--prefix", default="horizon", help="Redis key prefix")
    parser.add_argument(
        "--add-column",
        action="append",
        default=[],
        metavar='"NAME TYPE [default X]"',
        help="add a nullable column; later rows take X for a null, earlier rows read NULL; repeatable",
    )
    parser.add_argument(
        "--widen",
        action="append",
        default=[],
        metavar='"NAME NEWTYPE"',
        help="widen a column: int to bigint, float to double, decimal(p,s) to decimal(q,s), q>p",
    )
    parser.add_argument(
        "--drop-column",
        action="append",
        default=[],
        metavar="NAME",
        help="drop a column from reads at later snapshots (files keep it); repeatable",
    )
    parser.add_argument("--json", action="store_true", help="print the new version as JSON")
    return parser


def main_table(argv: Sequence[str] | None = None) -> int:
    """Entry point for ``horizon table``; returns the process exit code."""
    return run_command("horizon table", build_parser(), _run, argv)


def requested_changes(args: argparse.Namespace) -> list[SchemaChange]:
    changes: list[SchemaChange] = [parse_add(text) for text in args.add_column]
    changes += [parse_widen(text) for text in args.widen]
    changes += [DropColumn(name.strip()) for name in args.drop_column]
    if not changes:
        raise InvalidArgument("name a change: --add-column, --widen or --drop-column")
    return changes


def _run(args: argparse.Namespace) -> int:
    outcome = alter_table(args.redis, args.table, requested_changes(args), prefix=args.prefix)
    version = outcome.version
    if args.json:
        print(json.dumps({"table": args.table, "changed": outcome.changed, **version.to_dict()}))
        return 0
    columns = ", ".join(
        f"{c.name} {c.type}" + (f" default {c.default}" if c.default is not None else "")
        for c in version.columns
    )
    when = (
        f"{version.effective} ({format_snapshot(version.effective)})" if version.effective else "0"
    )
    status = "altered" if outcome.changed else "unchanged (already in effect)"
    print(f"table {args.table} {status}: schema from commit timestamp {when}: {columns}")
    return 0
