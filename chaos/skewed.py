"""Start one of a run's processes with a clock the run can skew while it runs: ``python -m
chaos.skewed FILE -- python -m MODULE ARGS`` patches ``time.time`` and ``time.time_ns`` in this
interpreter to add the seconds written in ``FILE`` (read every 50 ms; missing or empty: 0), then
runs ``MODULE`` in it. Monotonic clocks stay true, as they do when an operator's NTP steps the
wall clock. The product never imports this (no new system dependency such as ``faketime``).
"""

from __future__ import annotations

import contextlib
import runpy
import sys
import threading
import time
from pathlib import Path

READ_EVERY_S = 0.05


def skewed_command(offset_file: Path, command: list[str]) -> list[str]:
    """``command`` (``python -m MODULE ...``) started with the skew of ``offset_file``."""
    return [sys.executable, "-m", "chaos.skewed", str(offset_file), "--", *command]


def write_offset(offset_file: Path, seconds: float) -> None:
    staging = offset_file.with_suffix(".tmp")
    staging.write_text(f"{seconds}\n")
    staging.replace(offset_file)


def _patch(offset_file: Path) -> None:
    offset = [0.0]
    true_time, true_time_ns = time.time, time.time_ns

    def read() -> None:
        with contextlib.suppress(OSError, ValueError):
            text = offset_file.read_text().strip() if offset_file.exists() else ""
            offset[0] = float(text) if text else 0.0

    def follow() -> None:
        while True:
            time.sleep(READ_EVERY_S)
            read()

    read()  # the process starts on the skewed clock
    time.time = lambda: true_time() + offset[0]
    time.time_ns = lambda: true_time_ns() + int(offset[0] * 1e9)
    threading.Thread(target=follow, daemon=True, name="chaos-skew").start()


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[1] != "--" or "-m" not in argv[2:4]:
        raise SystemExit("usage: python -m chaos.skewed FILE -- python -m MODULE ARGS")
    _patch(Path(argv[0]))
    command = argv[argv.index("-m", 2) + 1 :]
    sys.argv = list(command)
    runpy.run_module(command[0], run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
