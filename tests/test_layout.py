"""The house rules of the layout that the tools do not keep.

The import rules (the layers, the broker's rooms, no cycle, the package never importing the
checkout's demo, chaos, bench or tests) are import-linter contracts in ``pyproject.toml``, run by
``lint-imports`` in ``make lint``, ``make test`` and ``make test-fast``. The size of a function is
ruff's (C901, PLR0912, PLR0915). What is left here is one backstop on the size of a module."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BACKSTOP_LINES = 1_000
"""Far above any module today (the longest is about 580 lines). Ruff keeps each function small, but
not a module that keeps gaining small functions: one past this holds more than one idea."""

CHECKED = ("horizon_broker", "demo", "chaos", "bench", "tests")


def python_sources() -> list[Path]:
    return [
        path
        for folder in CHECKED
        for path in sorted((ROOT / folder).rglob("*.py"))
        if "_proto" not in path.parts
    ]


def test_no_module_outgrows_the_backstop_of_a_thousand_lines():
    oversized = {
        str(path.relative_to(ROOT)): lines
        for path in python_sources()
        if (lines := len(path.read_text().splitlines())) > BACKSTOP_LINES
    }
    assert oversized == {}
