"""``python -m demo`` (also ``horizon demo``, ``make demo``): the end-to-end demo on embedded
defaults, driving the product only through its public parts like a user would."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="horizon demo", description="run the end-to-end demo on embedded defaults"
    )
    parser.add_argument("--seed", type=int, default=7, help="generator seed (same seed, same data)")
    parser.add_argument("--accounts", type=int, help="number of accounts (default 200,000)")
    parser.add_argument("--batches", type=int, help="batches of changes after the load (default 4)")
    parser.add_argument("--quick", action="store_true", help="a small run: 2,000 accounts")
    parser.add_argument("--picture", help="write the timeline picture (SVG) here")
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep the work directory, and the broker with its console up until Ctrl-C",
    )
    parser.add_argument("--spark-master", default="local[*]")
    parser.add_argument(
        "--cluster",
        action="store_true",
        help="start a Spark standalone cluster (a master, two workers) and run on it",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    from demo.run import DemoOptions
    from demo.run import main as run_demo

    args = build_parser().parse_args(argv)
    chosen = {
        "seed": args.seed,
        "spark_master": args.spark_master,
        "keep": args.keep,
        "cluster": args.cluster,
        "picture": Path(args.picture) if args.picture else None,
    }
    if args.accounts is not None:
        chosen["accounts"] = args.accounts
    if args.batches is not None:
        chosen["batches"] = args.batches
    options = DemoOptions.quick(**chosen) if args.quick else DemoOptions(**chosen)
    return run_demo(options)


if __name__ == "__main__":
    sys.exit(main())
