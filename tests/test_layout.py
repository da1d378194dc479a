"""The house rules of the layout, read from the source: imports run one way, down the floors (and
inside the broker down its rooms), no import cycle between modules, no module over 500 lines."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 500

FLOORS: tuple[tuple[str, ...], ...] = (
    ("horizon_broker._core",),
    ("horizon_broker.timeline",),
    ("horizon_broker.locks",),
    ("horizon_broker.watermark",),
    ("horizon_broker.pins",),
    ("horizon_broker.ingest",),
    ("horizon_broker.compaction",),
    ("horizon_broker.broker",),
    (
        "horizon_broker.cli",
        "horizon_broker.client",
        "horizon_broker.render",
        "horizon_broker.tokens",
    ),
    ("demo", "chaos", "bench"),
)
"""Bottom to top: a package may import its own floor's packages and the floors below (the
namespace's own ``__init__`` only names what it exports, loaded on first use)."""

BROKER_ROOMS: tuple[tuple[str, ...], ...] = tuple(
    tuple(f"horizon_broker.broker.{room}" for room in rooms)
    for rooms in (
        ("sql",),
        ("grants",),
        ("config",),
        ("observe",),
        ("spark",),
        ("direct_lookup",),
        ("engine",),
        ("api", "flight", "console"),
    )
)
"""Inside the broker, bottom to top (``broker._proto`` is generated and used by any room); the
doors, gRPC (``api``), Arrow Flight SQL (``flight``) and the web console (``console``), share
the top; metrics and structured logs (``observe``) sit under everything that reports to them."""

PACKAGES = (*(name for floor in FLOORS for name in floor), "horizon_broker")


def modules() -> Iterator[tuple[str, Path]]:
    seen: set[Path] = set()
    for package in PACKAGES:
        base = ROOT / package.replace(".", "/")
        if base.with_suffix(".py").is_file():
            paths = [base.with_suffix(".py")]
        elif base.is_dir():
            # the namespace's own package: its modules only (its rooms are listed above)
            paths = sorted(base.glob("*.py") if package == "horizon_broker" else base.rglob("*.py"))
        else:
            continue
        for path in paths:
            if "_proto" in path.parts or path in seen:
                continue
            seen.add(path)
            relative = path.relative_to(ROOT).with_suffix("")
            parts = relative.parts[:-1] if relative.name == "__init__" else relative.parts
            yield ".".join(parts), path


def imported(path: Path, module: str) -> set[str]:
    """Every module ``path`` imports, at any depth of its code (lazy imports count too)."""
    found: set[str] = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


SOURCES = dict(modules())
IMPORTS = {module: imported(path, module) for module, path in SOURCES.items()}


def level(module: str, layers: tuple[tuple[str, ...], ...]) -> int | None:
    for index, names in enumerate(layers):
        if any(module == name or module.startswith(name + ".") for name in names):
            return index
    return None


def ours(name: str) -> str | None:
    """The module of ours ``name`` refers to (a name imported from a module is that module)."""
    while name:
        if name in SOURCES:
            return name
        name = name.rpartition(".")[0]
    return None


def test_imports_never_run_up_the_floors():
    upward = []
    for module, names in IMPORTS.items():
        here = level(module, FLOORS)
        for name in names:
            target = ours(name)
            if target is None:
                continue
            there = level(target, FLOORS)
            if here is not None and there is not None and there > here:
                upward.append(f"{module} imports {target}")
    assert upward == []


def test_inside_the_broker_imports_run_from_the_doors_to_engine_to_sql_and_spark():
    upward = []
    for module, names in IMPORTS.items():
        here = level(module, BROKER_ROOMS)
        if here is None:
            continue
        for name in names:
            target = ours(name)
            there = level(target, BROKER_ROOMS) if target is not None else None
            if there is not None and there > here:
                upward.append(f"{module} imports {target}")
    assert upward == []


def test_no_import_cycle_between_modules():
    graph = {
        module: {t for name in names if (t := ours(name)) is not None and t != module}
        for module, names in IMPORTS.items()
    }
    # A package's __init__ that re-exports its modules is not a cycle with them.
    for module in graph:
        graph[module] = {t for t in graph[module] if not module.startswith(t + ".")}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = [0]

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for successor in graph.get(node, ()):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    assert cycles == []


@pytest.mark.parametrize("module", sorted(SOURCES))
def test_no_module_is_over_500_lines(module):
    lines = len(SOURCES[module].read_text().splitlines())
    assert lines <= MAX_LINES, f"{module} has {lines} lines"
