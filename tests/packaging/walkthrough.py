"""The getting-started page as a script: its marked blocks, in order, and the outputs it shows.

The page marks what a reader types with ``<!-- run -->`` (a ``sh`` or ``python`` block; the
broker, left running in its own terminal, with ``<!-- run: serve -->``) and what the reader then
sees with ``<!-- output -->``. A shown output elides what differs from run to run (timestamps,
snapshots, tokens, timings) with ``…``; everything else must be printed as shown.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MARKED_BLOCK = re.compile(
    r"^<!-- (?P<marker>run|run: serve|output) -->\n```(?P<language>\w+)\n(?P<body>.*?)^```$",
    re.MULTILINE | re.DOTALL,
)
BLOCK_MARK = "::horizon-walkthrough-block {}::"
PYTHON_END = "HORIZON_WALKTHROUGH_PYTHON"
LOOPBACK_ADDRESS = re.compile(r"127\\\.0\\\.0\\\.1:\d+")


@dataclass(frozen=True, slots=True)
class Block:
    """One marked block: ``kind`` is ``serve``, ``sh``, ``python`` or ``output``."""

    kind: str
    text: str


def marked_blocks(markdown: str) -> list[Block]:
    """The page's marked blocks in the order they appear."""
    blocks = []
    for found in MARKED_BLOCK.finditer(markdown):
        marker, language = found["marker"], found["language"]
        kind = {"run: serve": "serve", "output": "output"}.get(marker, language)
        if kind not in {"serve", "sh", "python", "output"}:
            raise ValueError(f"a marked block in {language!r}: the walk-through runs sh and python")
        blocks.append(Block(kind, found["body"].rstrip("\n")))
    return blocks


def as_script(blocks: list[Block], replacements: dict[str, str]) -> str:
    """One bash script running every ``sh`` and ``python`` block in order, as a reader in one
    terminal would (variables carry over), each announced by :data:`BLOCK_MARK` so its output
    can be told apart; ``replacements`` put this run's addresses where the page shows its own."""
    lines = ["set -euo pipefail"]
    for number, block in enumerate(blocks):
        text = block.text
        for shown, actual in replacements.items():
            text = text.replace(shown, actual)
        if block.kind == "sh":
            lines += [f"echo '{BLOCK_MARK.format(number)}'", text]
        elif block.kind == "python":
            lines += [f"echo '{BLOCK_MARK.format(number)}'", f"python - <<'{PYTHON_END}'", text]
            lines.append(PYTHON_END)
    return "\n".join(lines) + "\n"


def outputs_by_block(printed: str) -> dict[int, str]:
    """What each block printed, keyed by its number in :func:`marked_blocks`."""
    outputs: dict[int, str] = {}
    mark = re.compile("^" + re.escape(BLOCK_MARK).replace(r"\{\}", r"(\d+)") + "$", re.M)
    pieces = mark.split(printed)
    for number, output in zip(pieces[1::2], pieces[2::2], strict=True):
        outputs[int(number)] = output
    return outputs


def line_pattern(shown: str) -> re.Pattern[str]:
    """A shown line as a pattern: ``…`` stands for anything, and a loopback address for any
    port (the test's broker listens on free ports, the page shows the defaults)."""
    pattern = ".*".join(re.escape(part) for part in shown.rstrip().split("…"))
    return re.compile(LOOPBACK_ADDRESS.sub(r"127\\.0\\.0\\.1:\\d+", pattern))


def missing_from(printed: str, shown: str) -> str | None:
    """The first shown line not printed (shown lines must appear in order, each a whole line,
    other lines may come between them); None when all were."""
    printed_lines = [line.rstrip() for line in printed.splitlines()]
    position = 0
    for shown_line in shown.splitlines():
        pattern = line_pattern(shown_line)
        while position < len(printed_lines) and not pattern.fullmatch(printed_lines[position]):
            position += 1
        if position == len(printed_lines):
            return shown_line
        position += 1
    return None


def shown_outputs(blocks: list[Block]) -> list[tuple[int, str]]:
    """Each output block with the number of the block that printed it (the run before it)."""
    pairs = []
    last_run = None
    for number, block in enumerate(blocks):
        if block.kind == "output":
            if last_run is None:
                raise ValueError("an output block before any run block")
            pairs.append((last_run, block.text))
        else:
            last_run = number
    return pairs
