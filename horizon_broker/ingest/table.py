"""The ingestion table definition: one typed object loaded from TOML.

It holds everything the pipeline needs (key, how versions compare, deletes, time chunks, key
partitions, retention, storage) and derives the :class:`TableDescriptor` that brokers read.

Example::

    name = "accounts"
    mode = "upsert"                 # or "append"
    primary_key = ["user_id"]
    comparison = ["updated_at"]     # newest version wins; ties by source order
    delete_column = "deleted"       # optional boolean column
    time_column = "updated_at"      # optional; without it, rows are chunked by commit time
    granularity = "DAY"
    key_partitions = 4
    retention = "7d"                # or retention_ms = 604800000
    storage_root = "/data/horizon"  # any Hadoop URI Spark can write, e.g. s3a://bucket/horizon
    out_of_order = "store"          # or "drop"
    update_cadence = 1              # apply validUntil updates once N batches have some pending
    checkpoint_interval = 100       # checkpoint the commit log every N finished transactions
    gc_grace = "10m"                # or gc_grace_ms: keep replaced segments' files this long
    transaction_column = "txn"      # optional: changes sharing a value commit together
    driver_batch_rows = 10000       # batches up to this size run on the driver, row by row
    driver_columnar_rows = 1000000  # and up to this size as Arrow columns (0: on Spark)
    version = "2024-01-01T00:00:00.000Z"

    [columns]
    user_id = "string"
    balance = "bigint"
    updated_at = "timestamp"
    deleted = "boolean"
    txn = "string"

Transactions (``transaction_column``): all changes of one source transaction (one value of that
column) that a server ingests in one batch share ONE commit timestamp, the one the transaction's
first change would have had, so a reader at any snapshot sees all of the transaction or none of it.
Transactions therefore get strictly increasing commit timestamps in the source order of their first
changes. A null value is a transaction of its own (the change commits alone, as without the column).
When one transaction changes a key twice, the newer by the comparison columns wins (ties: the later
in source order); the loser is stored with an empty interval, or dropped with
``out_of_order = "drop"``, so a key never has two visible versions with the same ``validFrom``. The
column stays a normal user column, stored in the segments (readers can see which transaction wrote
a version). Atomicity is per server and batch: a transaction whose keys fall in key partitions owned
by different servers, or that spans batches, commits in several pieces.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from horizon_broker._core.errors import InvalidArgument
from horizon_broker.ingest.granularity import Granularity
from horizon_broker.timeline.interval import format_instant, parse_instant
from horizon_broker.watermark.catalog import ColumnSpec, TableDescriptor

DEFAULT_VERSION = "1970-01-01T00:00:00.000Z"
_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|h|d|w)\s*$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
RESERVED_COLUMNS = frozenset(
    {
        *("_acc", "_bucket", "_carry", "_chain", "_chunk", "_cmp", "_del", "_deleted", "_file"),
        *("_first", "_hi", "_inBatch", "_isFirst", "_kp", "_kpDir", "_level", "_lo", "_n"),
        *("_newSeg", "_newUntil", "_next", "_off", "_ord", "_pid", "_position", "_prev", "_rank"),
        *("_root", "_row", "_rows", "_seg", "_sourceFile", "_sourcePosition", "_tchunk", "_tmin"),
        *("_ts", "_updateFrom", "_validFrom", "_metadata", "_group", "_segment"),
        *("_row_count", "_row_max", "_row_min", "_tmin_min"),
    }
)
"""Column names the ingestion pipeline gives its own columns beside the user's (and Spark's file
metadata column): a user column of one of these names would be overwritten or shadowed."""
RESERVED_PREFIXES = ("_i_", "_update_")
"""Prefixes of the pipeline's derived names (the key index's columns, the updater's keys)."""


class OutOfOrder(StrEnum):
    """What happens to a record older than its key's current version."""

    STORE = "store"
    """Keep it with an empty interval (validFrom == validUntil): never visible, kept for history."""
    DROP = "drop"


@dataclass(frozen=True, slots=True, kw_only=True)
class TableDefinition:
    name: str
    columns: tuple[ColumnSpec, ...]
    primary_key: tuple[str, ...] = ()
    upsert: bool = True
    comparison_columns: tuple[str, ...] = ()
    delete_column: str | None = None
    time_column: str | None = None
    granularity: Granularity = Granularity.DAY
    key_partitions: int = 1
    retention_ms: int | None = None
    storage_root: str = "./horizon-data"
    out_of_order: OutOfOrder = OutOfOrder.STORE
    update_cadence: int = 1
    checkpoint_interval: int = 100
    """Checkpoint the commit log (and delete the records it covers) every N finished
    transactions, so a restart or a handover reads a checkpoint and at most N transactions."""
    gc_grace_ms: int = 600_000
    """How long the files of a segment replaced by the updater outlive the replacement, so that
    queries planned over it finish (0: delete at the next collection)."""
    transaction_column: str | None = None
    driver_batch_rows: int = 10_000
    """Batches of at most this many rows (and updater runs as small, see :mod:`horizon_broker.ingest.driver_rows`)
    run on the Spark driver without Spark jobs after the first; 0: every batch runs on Spark."""
    driver_columnar_rows: int = 1_000_000
    """Larger batches of at most this many rows run on the driver too, as Arrow columns (see
    :mod:`horizon_broker.ingest.driver_columns`), where ``driver_batch_rows`` lets the driver take batches at all;
    0: batches over ``driver_batch_rows`` rows run on Spark."""
    version: str = DEFAULT_VERSION
    properties: dict[str, str] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        descriptor = self.descriptor()  # validates names, key, comparison and time columns
        known = {column.name.lower(): column for column in self.columns}
        reserved = {name.lower() for name in RESERVED_COLUMNS}
        for column in self.columns:
            name = column.name.lower()
            if name in reserved or name.startswith(RESERVED_PREFIXES):
                raise InvalidArgument(
                    f"table {self.name!r}: column {column.name!r} has a name ingestion reserves "
                    "for its own columns (those starting with an underscore that it uses, e.g. "
                    "_ts, _kp, _chunk, _seg, and any starting with _i_ or _update_): rename it"
                )
        if self.delete_column is not None:
            column = known.get(self.delete_column.lower())
            if column is None:
                raise InvalidArgument(
                    f"table {self.name!r}: delete column {self.delete_column!r} is not a column"
                )
            if column.type.lower() != "boolean":
                raise InvalidArgument(
                    f"table {self.name!r}: delete column {self.delete_column!r} must be boolean, "
                    f"not {column.type}"
                )
            if not self.upsert:
                raise InvalidArgument(f"append-only table {self.name!r} cannot have deletes")
        if self.transaction_column is not None and self.transaction_column.lower() not in known:
            raise InvalidArgument(
                f"table {self.name!r}: transaction column {self.transaction_column!r} is not a "
                "column"
            )
        if self.update_cadence < 1:
            raise InvalidArgument(f"table {self.name!r}: update_cadence must be >= 1")
        if not 0 <= self.driver_batch_rows <= 1_000_000:
            raise InvalidArgument(
                f"table {self.name!r}: driver_batch_rows must be between 0 and 1000000"
            )
        if not 0 <= self.driver_columnar_rows <= 10_000_000:
            raise InvalidArgument(
                f"table {self.name!r}: driver_columnar_rows must be between 0 and 10000000"
            )
        if self.checkpoint_interval < 1:
            raise InvalidArgument(f"table {self.name!r}: checkpoint_interval must be >= 1")
        if self.gc_grace_ms < 0:
            raise InvalidArgument(f"table {self.name!r}: gc_grace must not be negative")
        if self.retention_ms is not None and self.retention_ms <= 0:
            raise InvalidArgument(f"table {self.name!r}: retention must be positive")
        if not self.storage_root:
            raise InvalidArgument(f"table {self.name!r}: storage_root is empty")
        if self.key_partitions > 32_767:
            raise InvalidArgument(f"table {self.name!r}: at most 32767 key partitions")
        del descriptor

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(column.name for column in self.columns)

    @property
    def table_root(self) -> str:
        """Where this table's files live: ``<storage_root>/<name>``."""
        return f"{self.storage_root.rstrip('/')}/{self.name}"

    def spark_schema_ddl(self) -> str:
        """The user columns as a Spark DDL string, for reading changelog files."""
        return ", ".join(f"`{column.name}` {column.type}" for column in self.columns)

    def descriptor(self) -> TableDescriptor:
        """What brokers need to query the table (registered in Redis by the server)."""
        properties = dict(self.properties)
        if self.delete_column:
            properties["delete_column"] = self.delete_column
        properties["out_of_order"] = self.out_of_order.value
        if self.transaction_column:
            properties["transaction_column"] = self.transaction_column
        return TableDescriptor(
            name=self.name,
            columns=self.columns,
            primary_key=self.primary_key,
            upsert=self.upsert,
            comparison_columns=self.comparison_columns,
            time_column=self.time_column,
            granularity=self.granularity.value,
            key_partitions=self.key_partitions,
            retention_ms=self.retention_ms,
            storage_root=self.table_root,
            properties=properties,
        )

    @classmethod
    def from_toml(cls, text: str, *, storage_root: str | None = None) -> TableDefinition:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as error:
            raise InvalidArgument(f"table definition is not valid TOML: {error}") from None
        if isinstance(data.get("table"), dict):
            data = {**data["table"], **{k: v for k, v in data.items() if k != "table"}}
        return cls.from_dict(data, storage_root=storage_root)

    @classmethod
    def load(cls, path: str | Path, *, storage_root: str | None = None) -> TableDefinition:
        """Load a TOML file; ``storage_root`` (e.g. from the command line) overrides the file's."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as error:
            raise InvalidArgument(f"cannot read table definition {path}: {error}") from None
        return cls.from_toml(text, storage_root=storage_root)

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, storage_root: str | None = None) -> TableDefinition:
        known = {
            "name", "columns", "mode", "upsert", "primary_key", "comparison", "comparison_columns",
            "delete_column", "time_column", "granularity", "key_partitions", "retention",
            "retention_ms", "storage_root", "out_of_order", "update_cadence", "version",
            "properties", "transaction_column", "checkpoint_interval", "gc_grace", "gc_grace_ms",
            "driver_batch_rows", "driver_columnar_rows",
        }  # fmt: skip
        unknown = sorted(set(data) - known)
        if unknown:
            raise InvalidArgument(f"unknown table definition keys: {', '.join(unknown)}")
        if "name" not in data:
            raise InvalidArgument("table definition has no name")
        mode = str(data.get("mode", "upsert" if data.get("upsert", True) else "append")).lower()
        if mode not in ("upsert", "append"):
            raise InvalidArgument(f"table mode {mode!r}: expected 'upsert' or 'append'")
        try:
            out_of_order = OutOfOrder(str(data.get("out_of_order", "store")).lower())
        except ValueError:
            raise InvalidArgument(
                f"out_of_order {data.get('out_of_order')!r}: expected 'store' or 'drop'"
            ) from None
        version = str(data.get("version", DEFAULT_VERSION))
        return cls(
            name=str(data["name"]),
            columns=_columns(data.get("columns")),
            primary_key=_names(data.get("primary_key", ()), "primary_key"),
            upsert=mode == "upsert",
            comparison_columns=_names(
                data.get("comparison", data.get("comparison_columns", ())), "comparison"
            ),
            delete_column=data.get("delete_column"),
            time_column=data.get("time_column"),
            granularity=Granularity.parse(str(data.get("granularity", "DAY"))),
            key_partitions=_int(data.get("key_partitions", 1), "key_partitions"),
            retention_ms=_duration(data, "retention"),
            storage_root=storage_root or str(data.get("storage_root", "./horizon-data")),
            out_of_order=out_of_order,
            update_cadence=_int(data.get("update_cadence", 1), "update_cadence"),
            checkpoint_interval=_int(data.get("checkpoint_interval", 100), "checkpoint_interval"),
            driver_batch_rows=_int(data.get("driver_batch_rows", 10_000), "driver_batch_rows"),
            driver_columnar_rows=_int(
                data.get("driver_columnar_rows", 1_000_000), "driver_columnar_rows"
            ),
            gc_grace_ms=_or_default(_duration(data, "gc_grace"), 600_000),
            transaction_column=_optional_name(data.get("transaction_column"), "transaction_column"),
            version=format_instant(parse_instant(version)) if "T" in version else version,
            properties={str(k): str(v) for k, v in dict(data.get("properties", {})).items()},
        )


def _columns(raw: Any) -> tuple[ColumnSpec, ...]:
    if isinstance(raw, dict):
        return tuple(ColumnSpec(str(name), str(type_)) for name, type_ in raw.items())
    if isinstance(raw, list):
        try:
            return tuple(ColumnSpec(str(item["name"]), str(item["type"])) for item in raw)
        except (KeyError, TypeError):
            raise InvalidArgument("columns must be a table of name = type, or a list of "
                                  "{name, type}") from None  # fmt: skip
    raise InvalidArgument("table definition has no columns")


def _names(raw: Any, role: str) -> tuple[str, ...]:
    if isinstance(raw, str):
        return (raw,)
    if isinstance(raw, list | tuple) and all(isinstance(item, str) for item in raw):
        return tuple(raw)
    raise InvalidArgument(f"{role} must be a column name or a list of column names")


def _optional_name(raw: Any, role: str) -> str | None:
    if raw is None or isinstance(raw, str):
        return raw
    raise InvalidArgument(f"{role} must be a column name, got {raw!r}")


def _int(raw: Any, role: str) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise InvalidArgument(f"{role} must be an integer, got {raw!r}")
    return raw


def _or_default(value: int | None, default: int) -> int:
    return default if value is None else value


def _duration(data: dict[str, Any], name: str) -> int | None:
    """``<name>_ms`` (an integer) or ``<name>`` (e.g. "7d"), in milliseconds; None if absent."""
    if f"{name}_ms" in data:
        return _int(data[f"{name}_ms"], f"{name}_ms")
    raw = data.get(name)
    if raw is None:
        return None
    match = _DURATION.match(str(raw))
    if not match:
        raise InvalidArgument(f"{name} {raw!r}: expected e.g. '7d', '12h', '30m'")
    return int(match.group(1)) * _UNIT_MS[match.group(2)]
