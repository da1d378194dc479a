"""The ``horizon`` command line. Sub-commands are added as the broker grows."""

from __future__ import annotations

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="horizon", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", help="run the end-to-end demo on embedded defaults")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "demo":
        from rich.console import Console

        console = Console()
        console.print("[bold]Horizon[/bold]: the end-to-end demo is not built yet.")
        console.print("Built so far: the segment timeline (timeline/).")
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
