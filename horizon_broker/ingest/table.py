"""The ingestion table definition: one typed object loaded from TOML.

It holds everything the pipeline needs (key, how versions compare, deletes, time chunks, key
partitions, retention, storage) and derives the :class:`TableDescriptor` that brokers read. The
file's keys, defaults and rules are declared once, on :class:`TableFile` (a pydantic model, see
:mod:`horizon_broker._config`); :class:`TableDefinition` is what the pipeline reads, built from it.
Each key has one spelling: ``retention_ms`` and ``gc_grace_ms`` are deprecated aliases of
``retention`` and ``gc_grace`` (accepted with a warning), ``upsert`` and ``comparison_columns`` are
refused with the key that replaced them.

Example::

    name = "accounts"
    mode = "upsert"                 # or "append"
    primary_key = ["user_id"]
    comparison = ["updated_at"]     # newest version wins; ties by source order
    delete_column = "deleted"       # optional boolean column
    time_column = "updated_at"      # optional; without it, rows are chunked by commit time
    granularity = "DAY"
    key_partitions = 4
    retention = "7d"                # optional: rewrites drop history older than this
    storage_root = "/data/horizon"  # any Hadoop URI Spark can write, e.g. s3a://bucket/horizon
    out_of_order = "store"          # or "drop"
    update_cadence = 1              # apply validUntil updates once N batches have some pending
    rewrite_target_rows = 2000000   # rewrites merge small neighbours up to this size (0: never)
    checkpoint_interval = 100       # checkpoint the commit log every N finished transactions
    gc_grace = "10m"                # keep replaced segments' files this long
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

    [partial_upsert]                # optional: records are events merged per column
    balance = "increment"           # see horizon_broker.ingest.partial_upsert

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

import logging
import os
import re
import tomllib
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    Field,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from horizon_broker._config import MODEL_CONFIG, Rule, RuleNote, refusing, validated
from horizon_broker._core.errors import InvalidArgument
from horizon_broker.ingest.debezium_settings import (
    ALLOW_TRUNCATE,
    DEBEZIUM_ORDER,
    MAX_DEAD_LETTERS,
    DebeziumOrder,
    check_debezium_keys,
)
from horizon_broker.ingest.granularity import Granularity
from horizon_broker.ingest.partial_upsert import (
    EVENT_LOG_COLUMNS,
    Strategy,
    check_partial_upsert,
    strategy_items,
)
from horizon_broker.timeline.interval import format_instant, parse_instant
from horizon_broker.watermark.catalog import ColumnSpec, TableDescriptor

log = logging.getLogger(__name__)

DEFAULT_VERSION = "1970-01-01T00:00:00.000Z"
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|h|d|w)\s*$")
RESERVED_COLUMNS = frozenset(
    {
        *("_acc", "_bucket", "_carry", "_chain", "_chunk", "_cmp", "_del", "_deleted", "_file"),
        *("_first", "_hi", "_inBatch", "_isFirst", "_kp", "_kpDir", "_level", "_lo", "_n"),
        *("_newSeg", "_newUntil", "_next", "_off", "_ord", "_pid", "_position", "_prev", "_rank"),
        *("_root", "_row", "_rows", "_seg", "_sourceFile", "_sourcePosition", "_tchunk", "_tmin"),
        *("_ts", "_updateFrom", "_validFrom", "_metadata", "_group", "_segment"),
        *("_row_count", "_row_max", "_row_min", "_tmin_min"),
        *EVENT_LOG_COLUMNS,
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
    """A table as the pipeline reads it, built from its checked file (:class:`TableFile`, where
    each key's default and meaning are)."""

    name: str
    columns: tuple[ColumnSpec, ...]
    primary_key: tuple[str, ...]
    upsert: bool
    comparison_columns: tuple[str, ...]
    delete_column: str | None
    time_column: str | None
    granularity: Granularity
    key_partitions: int
    retention_ms: int | None
    storage_root: str
    out_of_order: OutOfOrder
    update_cadence: int
    checkpoint_interval: int
    gc_grace_ms: int
    transaction_column: str | None
    driver_batch_rows: int
    driver_columnar_rows: int
    version: str
    properties: dict[str, str] = field(default_factory=dict, compare=False, hash=False)
    debezium_order: DebeziumOrder | None = None
    max_dead_letters: int = 1000
    allow_truncate: bool = False
    partial_upsert: tuple[tuple[str, Strategy], ...] | None = None
    """Per-column merge strategies (:mod:`horizon_broker.ingest.partial_upsert`); None: every
    record is a whole row."""
    column_defaults: tuple[tuple[str, str], ...] = ()  # fills a batch's null or missing values
    rewrite_target_rows: int = 2_000_000
    """The updater merges small segments into its rewrites up to this many rows (0: never)."""

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
    def from_toml(
        cls, text: str, *, storage_root: str | None = None, source: str | None = None
    ) -> TableDefinition:
        """A definition from TOML text (``source``: the file it came from, named in errors)."""
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as error:
            where = source or "table definition"
            raise InvalidArgument(f"{where} is not valid TOML: {error}") from None
        return cls.from_dict(data, storage_root=storage_root, source=source)

    @classmethod
    def load(cls, path: str | Path, *, storage_root: str | None = None) -> TableDefinition:
        """Load a TOML file; ``storage_root`` (e.g. from the command line) overrides the file's."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as error:
            raise InvalidArgument(f"cannot read table definition {path}: {error}") from None
        return cls.from_toml(text, storage_root=storage_root, source=str(path))

    @classmethod
    def from_dict(
        cls, data: dict[str, Any], *, storage_root: str | None = None, source: str | None = None
    ) -> TableDefinition:
        """A definition from the file's keys, checked whole (:class:`TableFile`)."""
        if storage_root:
            data = {**data, "storage_root": storage_root}
        return validated(TableFile, data, source=source).definition()


def absolute_root(root: str) -> str:
    """A local storage root written relative (the default ``./horizon-data``), made absolute
    against the working directory, as Spark resolves it when it writes: the root is registered
    for brokers, which run elsewhere and refuse every announced file outside it.

    >>> absolute_root("s3a://bucket/horizon"), absolute_root("/data/horizon")
    ('s3a://bucket/horizon', '/data/horizon')
    """
    if "://" in root or root.startswith("file:") or os.path.isabs(root):
        return root
    return os.path.abspath(root)


def _lowered(value: Any) -> Any:
    return value.lower() if isinstance(value, str) else value


def _one_or_more(value: Any) -> Any:
    return [value] if isinstance(value, str) else value


def _granularity(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    with refusing(""):
        return Granularity.parse(value)


_GRANULARITY_SCHEMA = {
    "type": "string",
    "enum": [
        spelling for member in Granularity for spelling in (member.value, member.value.lower())
    ],
}
"""The loader takes any case; an editor offers the upper and lower spellings."""


def _duration(value: str) -> str:
    if not _DURATION.match(value):
        raise Rule(
            "", f"must be a whole number and a unit (ms, s, m, h, d, w), e.g. '7d' (got {value!r})"
        )
    return value


Duration = Annotated[
    str,
    AfterValidator(_duration),
    WithJsonSchema({"type": "string", "pattern": _DURATION.pattern}),
    RuleNote("a number and a unit: ms, s, m, h, d, w"),
]
"""A length of time: a whole number and a unit, ``500ms``, ``30s``, ``10m``, ``12h``, ``7d``, ``2w``."""
ColumnNames = Annotated[list[str], BeforeValidator(_one_or_more)]
"""Column names: a list, or one name."""
_DEPRECATED = {"retention_ms": "retention", "gc_grace_ms": "gc_grace"}


def duration_ms(text: str) -> int:
    match = _DURATION.match(text)
    assert match is not None  # the model's pattern checked it
    return int(match.group(1)) * _UNIT_MS[match.group(2)]


class TableFile(BaseModel):
    """A table definition file: the table's name and columns, its key, how versions compare,
    deletes, time chunks, key partitions, retention and storage."""

    model_config = MODEL_CONFIG
    RENAMED: ClassVar[dict[str, str]] = {"upsert": "mode", "comparison_columns": "comparison"}

    name: str = Field(description="The table's name: letters, digits and underscores.")
    columns: dict[str, str] = Field(
        description='The user\'s columns, ``name = "spark type"`` (``[columns]``), in order.'
    )
    mode: Annotated[Literal["upsert", "append"], BeforeValidator(_lowered)] = Field(
        "upsert",
        description="``upsert``: versions per primary key, the newest visible; ``append``: no "
        "versions, no validity filter.",
    )
    primary_key: ColumnNames = Field(
        [], description="The key columns (an upsert table needs one); hashed into key partitions."
    )
    comparison: ColumnNames = Field(
        [], description="The columns that order a key's versions: the newest wins; ties by "
        "source order."
    )  # fmt: skip
    delete_column: str | None = Field(
        None,
        description="A boolean column: true ends the key's current version (upsert tables).",
    )
    time_column: str | None = Field(
        None,
        description="Chooses the time chunk of each version; without it, rows are chunked by "
        "commit time.",
    )
    granularity: Annotated[
        Granularity, BeforeValidator(_granularity), WithJsonSchema(_GRANULARITY_SCHEMA)
    ] = Field(Granularity.DAY, description="The time chunks' length (any case).")
    key_partitions: int = Field(
        1,
        ge=1,
        le=32_767,
        description="Partitions of the primary key's hash. Each draws every K-th segment "
        "number of a time chunk (failover safety), so one key partition can write 32768 / K "
        "batches into one time chunk and version.",
    )
    retention: Duration | None = Field(
        None,
        description="Rewrites drop history older than this below the LWM (unset: keep all). "
        "Deprecated alias: ``retention_ms`` (milliseconds).",
    )
    storage_root: str = Field(
        "./horizon-data",
        min_length=1,
        description="Where the table's files go, ``<storage_root>/<name>``: any Hadoop URI "
        "Spark can write (``s3a://bucket/horizon``); the command line may override it.",
    )
    out_of_order: Annotated[OutOfOrder, BeforeValidator(_lowered)] = Field(
        OutOfOrder.STORE,
        description="A record older than its key's current version: ``store`` keeps it with an "
        "empty interval (never visible, kept for history), ``drop`` drops it.",
    )
    update_cadence: int = Field(
        1,
        ge=1,
        description="Apply superseded versions' validUntil once N batches have some pending.",
    )
    rewrite_target_rows: int = Field(
        2_000_000,
        ge=0,
        description="The updater merges a segment it rewrites with the adjacent small segments "
        "(a quarter of this or less) into one of at most this many rows, so batches' small "
        "files do not pile up between compactions; 0: each segment is rewritten alone.",
    )
    checkpoint_interval: int = Field(
        100,
        ge=1,
        description="Checkpoint the commit log (and delete the records it covers) every N "
        "finished transactions, so a restart or a handover reads a checkpoint and at most N.",
    )
    gc_grace: Duration = Field(
        "10m",
        description="How long the files of a segment replaced by the updater outlive the "
        "replacement, so that queries planned over it finish (``0s``: delete at the next "
        "collection). Deprecated alias: ``gc_grace_ms`` (milliseconds).",
    )
    transaction_column: str | None = Field(
        None,
        description="Changes sharing a value of this column commit together, at one timestamp "
        "(per server and batch); a null value commits alone.",
    )
    driver_batch_rows: int = Field(
        10_000,
        ge=0,
        le=1_000_000,
        description="Batches of at most this many rows (and updater runs as small) run on the "
        "Spark driver without Spark jobs after the first; 0: every batch runs on Spark.",
    )
    driver_columnar_rows: int = Field(
        1_000_000,
        ge=0,
        le=10_000_000,
        description="Larger batches of at most this many rows run on the driver too, as Arrow "
        "columns, where ``driver_batch_rows`` lets the driver take batches at all; 0: batches "
        "over ``driver_batch_rows`` rows run on Spark.",
    )
    version: str = Field(
        DEFAULT_VERSION,
        description="The definition's version; an instant (``2024-01-01T00:00:00Z``) is "
        "normalized to milliseconds.",
    )
    properties: dict[str, str | int | float | bool] = Field(
        {}, description="More properties registered with the table (as strings)."
    )
    debezium_order: Annotated[DebeziumOrder | None, BeforeValidator(_lowered)] = DEBEZIUM_ORDER
    max_dead_letters: int = MAX_DEAD_LETTERS
    allow_truncate: bool = ALLOW_TRUNCATE
    partial_upsert: dict[str, Annotated[Strategy, BeforeValidator(_lowered)]] | None = Field(
        None,
        description="Partial upserts: records are events merged into their key's row in "
        "comparison order, each column by its strategy (unnamed: ``overwrite``).",
    )

    @model_validator(mode="before")
    @classmethod
    def _deprecated_aliases(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not set(data) & set(_DEPRECATED):
            return data
        data = dict(data)
        for old, new in _DEPRECATED.items():
            if old in data:
                data[new] = _alias_value(data, old, new)
        return data

    @field_validator("version")
    @classmethod
    def _normalized_version(cls, value: str) -> str:
        with refusing(""):
            return format_instant(parse_instant(value)) if "T" in value else value

    @model_validator(mode="after")
    def _columns_agree(self) -> TableFile:
        known = {name.lower(): type_ for name, type_ in self.columns.items()}
        _check_reserved(self.columns)
        _check_deletes(self, known)
        if self.transaction_column is not None and self.transaction_column.lower() not in known:
            raise Rule(
                "transaction_column",
                f"transaction column {self.transaction_column!r} is not a column",
            )
        check_debezium_keys(self, known)
        check_partial_upsert(self, known)
        with refusing(""):
            self.definition().descriptor()  # names, key, comparison and time columns
        return self

    def definition(self) -> TableDefinition:
        """The pipeline's view of this file."""
        return TableDefinition(
            name=self.name,
            columns=tuple(ColumnSpec(name, type_) for name, type_ in self.columns.items()),
            primary_key=tuple(self.primary_key),
            upsert=self.mode == "upsert",
            comparison_columns=tuple(self.comparison),
            delete_column=self.delete_column,
            time_column=self.time_column,
            granularity=self.granularity,
            key_partitions=self.key_partitions,
            retention_ms=None if self.retention is None else duration_ms(self.retention),
            storage_root=absolute_root(self.storage_root),
            out_of_order=self.out_of_order,
            update_cadence=self.update_cadence,
            rewrite_target_rows=self.rewrite_target_rows,
            checkpoint_interval=self.checkpoint_interval,
            gc_grace_ms=duration_ms(self.gc_grace),
            transaction_column=self.transaction_column,
            driver_batch_rows=self.driver_batch_rows,
            driver_columnar_rows=self.driver_columnar_rows,
            version=self.version,
            properties={str(key): str(value) for key, value in self.properties.items()},
            debezium_order=self.debezium_order,
            max_dead_letters=self.max_dead_letters,
            allow_truncate=self.allow_truncate,
            partial_upsert=strategy_items(self.partial_upsert),
        )


def _alias_value(data: dict[str, Any], old: str, new: str) -> str:
    """A deprecated ``<key>_ms`` as its key's duration, with a warning."""
    value = data.pop(old)
    if new in data:
        raise Rule(old, f"give {new} only ({old} is its deprecated alias)")
    if isinstance(value, bool) or not isinstance(value, int):
        raise Rule(old, f"must be an integer number of milliseconds (got {value!r})")
    log.warning(
        'table definition %r: %s is deprecated, write %s = "%dms"',
        data.get("name"),
        old,
        new,
        value,
    )
    return f"{value}ms"


def _check_reserved(columns: dict[str, str]) -> None:
    reserved = {name.lower() for name in RESERVED_COLUMNS}
    for name in columns:
        if name.lower() in reserved or name.lower().startswith(RESERVED_PREFIXES):
            raise Rule(
                "columns",
                f"column {name!r} has a name ingestion reserves for its own columns (those "
                "starting with an underscore that it uses, e.g. _ts, _kp, _chunk, _seg, and any "
                "starting with _i_ or _update_): rename it",
            )


def _check_deletes(table: TableFile, known: dict[str, str]) -> None:
    if table.delete_column is None:
        return
    type_ = known.get(table.delete_column.lower())
    if type_ is None:
        raise Rule("delete_column", f"{table.delete_column!r} is not a column")
    if type_.lower() != "boolean":
        raise Rule("delete_column", f"{table.delete_column!r} must be boolean, not {type_}")
    if table.mode != "upsert":
        raise Rule("delete_column", "an append-only table cannot have deletes")
