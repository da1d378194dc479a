"""A reference model of reads across schema versions, in plain Python.

It knows nothing of segments, files or Spark: a table is its current schema and one row per key
(every column ever added, NULL where a row was written before the column existed); a read at the
snapshot after batch ``i`` is the rows as batch ``i`` left them, projected on the columns of the
schema batch ``i`` was written under.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

BASE = (("k", "string", None), ("seq", "bigint", None), ("v", "int", None), ("f", "float", None))
"""The first schema: key, comparison column, and the two widenable columns."""


@dataclass
class SchemaModel:
    columns: list[tuple[str, str, str | None]] = field(default_factory=lambda: list(BASE))
    dropped: list[str] = field(default_factory=list)
    rows: dict[str, dict[str, Any]] = field(default_factory=dict)
    added: int = 0
    seq: int = 0

    @property
    def names(self) -> list[str]:
        return [name for name, _, _ in self.columns]

    def alter(self, kind: str) -> str | None:
        """The CLI spelling of the change ``kind`` asks for now (None: nothing to change)."""
        types = {name: type_ for name, type_, _ in self.columns}
        if kind in ("add", "add_default"):
            self.added += 1
            default = "7" if kind == "add_default" else None
            self.columns.append((f"c{self.added}", "bigint", default))
            return f"--add-column=c{self.added} bigint" + (" default 7" if default else "")
        if kind == "widen":
            for name, old, new in (("v", "int", "bigint"), ("f", "float", "double")):
                if types.get(name) == old:
                    self.columns = [(n, new if n == name else t, d) for n, t, d in self.columns]
                    return f"--widen={name} {new}"
            return None
        droppable = [name for name in self.names if name not in ("k", "seq")]
        if not droppable:
            return None
        victim = droppable[-1]
        self.columns = [column for column in self.columns if column[0] != victim]
        self.dropped.append(victim)
        return f"--drop-column={victim}"

    def upsert(self, batch: list[tuple[str, int | None, float | None, int | None]]) -> list[dict]:
        """The batch's source rows (the current columns, None where a value is missing); the
        model's rows after it (newest seq wins: every row has a new, higher seq)."""
        source = []
        for key, v, f, extra in batch:
            self.seq += 1
            drawn = {"k": key, "seq": self.seq, "v": v, "f": f}
            values = {name: drawn.get(name, extra) for name in self.names}
            source.append(values)
            stored = {name: None for name in self.every_column}
            for name, _, default in self.columns:
                value = values[name]
                stored[name] = int(default) if value is None and default is not None else value
            self.rows[key] = stored
        return source

    @property
    def every_column(self) -> list[str]:
        return [*self.names, *self.dropped]

    def answer(self) -> tuple[list[str], list[tuple]]:
        """What a read at the snapshot after the last batch returns: the columns and rows."""
        names = self.names
        rows = sorted(tuple(row.get(name) for name in names) for row in self.rows.values())
        return names, rows
