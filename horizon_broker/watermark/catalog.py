"""Table descriptors: what a server publishes about a table so brokers can query it.

An ingestion server registers the descriptor of every table it writes; the broker's follower reads
them from Redis and builds its SQL catalog from them. It is deliberately the subset of the ingestion
table definition a reader needs (schema, key, how versions compare, layout hints), in a stable JSON
form.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from typing import Any

from horizon_broker._core.errors import InvalidArgument
from horizon_broker.watermark.schema_versions import SchemaHistory, SchemaVersion

VALID_FROM = "validFrom"
VALID_UNTIL = "validUntil"
VALIDITY_COLUMNS = (VALID_FROM, VALID_UNTIL)
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True, slots=True)
class ColumnSpec:
    """One user column: its name and Spark SQL type (``bigint``, ``string``, ``decimal(18,2)``...)."""

    name: str
    type: str

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise InvalidArgument(f"invalid column name {self.name!r}")
        if not self.type:
            raise InvalidArgument(f"column {self.name!r} has no type")


@dataclass(frozen=True, slots=True)
class TableDescriptor:
    """A registered table as readers see it.

    ``columns`` are the user's columns; upsert tables' segments also carry ``validFrom`` and
    ``validUntil`` (int64 HLCs), which readers may select but never filter away.
    """

    name: str
    columns: tuple[ColumnSpec, ...]
    primary_key: tuple[str, ...] = ()
    upsert: bool = True
    comparison_columns: tuple[str, ...] = ()
    time_column: str | None = None
    granularity: str = "DAY"
    key_partitions: int = 1
    retention_ms: int | None = None
    storage_root: str = ""
    properties: dict[str, str] = field(default_factory=dict, compare=False, hash=False)
    schema_versions: tuple[SchemaVersion, ...] = ()
    """Every schema version after an alter (:mod:`horizon_broker.watermark.schema_versions`);
    ``columns`` are then the newest one's. Empty: the table never changed."""

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise InvalidArgument(
                f"invalid table name {self.name!r}: letters, digits and underscores only"
            )
        known = self._check_columns()
        self._check_roles(known)
        if self.key_partitions < 1:
            raise InvalidArgument(f"table {self.name!r}: key_partitions must be >= 1")

    def _check_columns(self) -> set[str]:
        """The column names, lower-cased, once they are present, distinct and not reserved."""
        if not self.columns:
            raise InvalidArgument(f"table {self.name!r} has no columns")
        names = [column.name.lower() for column in self.columns]
        if len(set(names)) != len(names):
            raise InvalidArgument(f"table {self.name!r} has duplicate column names")
        reserved = {name.lower() for name in VALIDITY_COLUMNS}
        if reserved & set(names):
            raise InvalidArgument(
                f"table {self.name!r} declares a reserved column ({', '.join(VALIDITY_COLUMNS)})"
            )
        return set(names)

    def _check_roles(self, known: set[str]) -> None:
        """The key, comparison and time columns name declared columns; upsert needs a key."""
        for role, columns in (
            ("primary key", self.primary_key),
            ("comparison", self.comparison_columns),
        ):
            for column in columns:
                if column.lower() not in known:
                    raise InvalidArgument(
                        f"table {self.name!r}: {role} column {column!r} is not a column"
                    )
        if self.upsert and not self.primary_key:
            raise InvalidArgument(f"upsert table {self.name!r} needs a primary key")
        if self.time_column is not None and self.time_column.lower() not in known:
            raise InvalidArgument(
                f"table {self.name!r}: time column {self.time_column!r} is not a column"
            )

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(column.name for column in self.columns)

    @property
    def schema_history(self) -> SchemaHistory:
        """The table's schema versions (one, since 0, when it never changed)."""
        if self.schema_versions:
            return SchemaHistory(self.schema_versions)
        return SchemaHistory.initial(tuple((c.name, c.type) for c in self.columns))

    def with_schema(self, history: SchemaHistory) -> TableDescriptor:
        """This descriptor under ``history``: its columns are the newest version's."""
        columns = tuple(ColumnSpec(c.name, c.type) for c in history.current.columns)
        versions = history.versions if len(history.versions) > 1 else ()
        return dataclasses.replace(self, columns=columns, schema_versions=versions)

    def to_dict(self) -> dict[str, Any]:
        extra: dict[str, Any] = {}
        if self.schema_versions:
            extra["schema_versions"] = SchemaHistory(self.schema_versions).to_list()
        return {
            **extra,
            "name": self.name,
            "columns": [[column.name, column.type] for column in self.columns],
            "primary_key": list(self.primary_key),
            "upsert": self.upsert,
            "comparison_columns": list(self.comparison_columns),
            "time_column": self.time_column,
            "granularity": self.granularity,
            "key_partitions": self.key_partitions,
            "retention_ms": self.retention_ms,
            "storage_root": self.storage_root,
            "properties": dict(self.properties),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TableDescriptor:
        try:
            return cls(
                name=data["name"],
                columns=tuple(ColumnSpec(name, type_) for name, type_ in data["columns"]),
                primary_key=tuple(data.get("primary_key", ())),
                upsert=bool(data.get("upsert", True)),
                comparison_columns=tuple(data.get("comparison_columns", ())),
                time_column=data.get("time_column"),
                granularity=str(data.get("granularity", "DAY")),
                key_partitions=int(data.get("key_partitions", 1)),
                retention_ms=data.get("retention_ms"),
                storage_root=str(data.get("storage_root", "")),
                properties=dict(data.get("properties", {})),
                schema_versions=SchemaHistory.from_list(data["schema_versions"]).versions
                if data.get("schema_versions")
                else (),
            )
        except (KeyError, TypeError, ValueError) as error:
            raise InvalidArgument(f"malformed table descriptor: {error!r}") from None

    @classmethod
    def from_json(cls, text: str | bytes) -> TableDescriptor:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise InvalidArgument(f"table descriptor is not JSON: {error}") from None
        return cls.from_dict(data)
