"""What every ``horizon`` subcommand that runs a job shares: logging set up the same way, a
refused request printed as one line naming the command with exit code 2, Ctrl-C as 130, and
``KEY=VALUE`` options parsed with an error that names the option."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from horizon_broker._core.errors import HorizonError, InvalidArgument
from horizon_broker._core.logs import configure_logging

EXIT_REFUSED = 2
EXIT_INTERRUPTED = 130


def run_command(
    program: str,
    parser: argparse.ArgumentParser,
    run: Callable[[argparse.Namespace], int],
    argv: Sequence[str] | None = None,
) -> int:
    """Parse ``argv`` with ``parser`` and run ``run``; returns the process exit code."""
    configure_logging("text", "INFO")  # escaped fields, libraries' chatter at WARNING
    args = parser.parse_args(argv)
    try:
        return run(args)
    except HorizonError as error:
        print(f"{program}: {error}", file=sys.stderr)
        return EXIT_REFUSED
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


def key_value_pairs(items: Sequence[str], what: str) -> dict[str, str]:
    """``KEY=VALUE`` options (``--spark-conf``, ``--source-option``) as a dict; ``what`` names the
    option in the error a malformed one gets.

    >>> key_value_pairs(["a=1", "b=x=y"], "--spark-conf")
    {'a': '1', 'b': 'x=y'}
    """
    result = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InvalidArgument(f"{what} {item!r}: expected KEY=VALUE")
        result[key] = value
    return result
