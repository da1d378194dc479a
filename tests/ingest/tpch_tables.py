"""Eight small tables of a TPC-H-like schema, as ingestion definitions and changelog batches.

Tables are named ``<prefix><name>`` (tests sharing one state store use their own prefix);
changelog batches and expected states are by the plain name. Each table has an integer key ``id``, a ``parent`` (the key of the row it belongs to: a nation's
region, an order's customer ...), an ``amount``, the comparison column ``seq`` and a ``deleted``
flag. Batch 1 inserts every row; batch 2 updates every third row and deletes every fifth, so the
expected state after each batch is easy to write down (:func:`expected`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ROWS = {
    "region": 5,
    "nation": 25,
    "supplier": 10,
    "customer": 30,
    "part": 20,
    "partsupp": 40,
    "orders": 60,
    "lineitem": 150,
}
TABLES = tuple(ROWS)


def definition(name: str, storage: Path, key_partitions: int = 2) -> dict[str, Any]:
    """The definition of a table named ``name`` (any prefix)."""
    return {
        "name": name,
        "columns": {
            "id": "bigint",
            "parent": "bigint",
            "amount": "bigint",
            "seq": "bigint",
            "deleted": "boolean",
        },
        "primary_key": ["id"],
        "comparison": ["seq"],
        "delete_column": "deleted",
        "key_partitions": key_partitions,
        "storage_root": str(storage),
    }


def toml(definition: dict[str, Any]) -> str:
    lines = [f"{k} = {json.dumps(v)}" for k, v in definition.items() if k != "columns"]
    lines.append("[columns]")
    lines += [f"{k} = {json.dumps(v)}" for k, v in definition["columns"].items()]
    return "\n".join(lines) + "\n"


def batch(name: str, number: int) -> list[dict[str, Any]]:
    """The changelog rows of batch ``number`` (1: inserts; 2: updates and deletes)."""
    rows = []
    for key in range(ROWS[name]):
        parent = key % 7
        if number == 1:
            rows.append(
                {"id": key, "parent": parent, "amount": key * 10, "seq": 1, "deleted": False}
            )
        elif key % 5 == 0:
            rows.append({"id": key, "parent": parent, "amount": 0, "seq": 2, "deleted": True})
        elif key % 3 == 0:
            rows.append(
                {"id": key, "parent": parent, "amount": key * 10 + 1, "seq": 2, "deleted": False}
            )
    return rows


def expected(name: str, batches: int) -> dict[int, int]:
    """``{id: amount}`` once the first ``batches`` batches are ingested."""
    state: dict[int, int] = {}
    for number in range(1, batches + 1):
        for row in batch(name, number):
            if row["deleted"]:
                state.pop(row["id"], None)
            else:
                state[row["id"]] = row["amount"]
    return state


def write_batch(directory: Path, name: str, number: int) -> Path:
    """Batch ``number`` of ``name`` as a JSON changelog file in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{number:03d}.json"
    staging = directory / f".{number:03d}.tmp"
    staging.write_text("".join(json.dumps(row) + "\n" for row in batch(name, number)))
    staging.rename(path)  # a watching server never sees half a file
    return path


def write_tables(root: Path, names: tuple[str, ...] = TABLES, prefix: str = "") -> dict[str, Path]:
    """Each table's definition file under ``root`` (storage under ``root/storage``), by plain
    name; the tables are named ``<prefix><name>``."""
    files = {}
    for name in names:
        path = root / f"{prefix}{name}.toml"
        path.write_text(toml(definition(f"{prefix}{name}", root / "storage")))
        files[name] = path
    return files
