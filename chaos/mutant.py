"""Start one of a run's processes with a planted bug: ``python -m chaos.mutant NAME -- COMMAND``
applies mutation ``NAME`` (:mod:`chaos.mutations`) in this interpreter, then runs ``COMMAND``
(``horizon ...``, or ``-m module ...``) in it, as the unmutated process would have run it.

The product never imports this: an unmutated run starts its processes directly.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

from chaos.mutations import mutation


def mutated_command(name: str, command: list[str]) -> list[str]:
    """``command`` started through this module with mutation ``name``."""
    return [sys.executable, "-m", "chaos.mutant", name, "--", *command]


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        raise SystemExit("usage: python -m chaos.mutant NAME -- horizon ARGS | -m MODULE ARGS")
    planted, command = mutation(argv[0]), argv[2:]
    if Path(command[0]).name.startswith("python"):  # "python -m module": in this interpreter
        command = command[1:]
    planted.apply()
    print(f"mutation {planted.name}: {planted.bug}", flush=True)
    if command[0] == "-m":
        sys.argv = [command[1], *command[2:]]
        runpy.run_module(command[1], run_name="__main__", alter_sys=True)
        return 0
    if Path(command[0]).name == "horizon":
        from horizon_broker.cli import main as horizon

        sys.argv = ["horizon", *command[1:]]
        return int(horizon() or 0)
    raise SystemExit(f"chaos.mutant runs horizon or -m MODULE, not {command[0]!r}")


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
