"""What one ingestion server runs: its identity, its state store, and the tables it serves.

Loaded from a TOML file (``horizon ingest --config server.toml``) or built from ``--table``
options, and checked whole before the server writes anything: every table file must load, no
table may be listed twice, and the key partitions must exist. All problems are reported at once,
each naming the table and where it was declared. The file's keys, defaults and rules are declared
once, on :class:`ServerFile` (a pydantic model, see :mod:`horizon_broker._config`);
:class:`ServerConfig` is what the server runs, built from it::

    server_id = "ingest-1"
    redis = "redis://127.0.0.1:6379/0"
    watch = 5                     # poll every 5 s; absent: one pass over every source, then park
    source_root = "/landing"      # a table's default source: <source_root>/<table name>
    format = "json"               # the default changelog format

    [spark]
    master = "local[*]"
    [spark.conf]
    "spark.driver.memory" = "4g"

    [[tables]]
    definition = "orders.toml"    # relative to this file (or the definition's keys inline)
    source = "/landing/orders"
    partitions = [0, 1]           # the key partitions this server owns (default: all)
    # or: stream = "redis://127.0.0.1:6379/0#shop.public.orders"  (a Redis stream, see
    # horizon_broker.ingest.redis_stream_source)
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, Discriminator, Field, Tag, field_validator

from horizon_broker._config import MODEL_CONFIG, refusing, validated
from horizon_broker._core.errors import HorizonError, InvalidArgument
from horizon_broker._core.keys import DEFAULT_PREFIX, check_prefix, check_server_id
from horizon_broker._core.store_address import check_store_url
from horizon_broker.ingest.redis_stream_source import (
    DEFAULT_MAX_EVENTS,
    StreamSource,
    stream_source,
)
from horizon_broker.ingest.redis_stream_trim import OnTrimmed
from horizon_broker.ingest.table import TableDefinition, TableFile
from horizon_broker.locks.rules import STREAMING_INGESTION_PRIORITY

DEFAULT_FORMAT = "json"
Settings = dict[str, str | int | float | bool]
"""A table of settings handed on as strings (Spark's, a changelog reader's)."""


@dataclass(frozen=True, slots=True)
class TableSource:
    """One table a server serves: its definition, where its changelog lands, which partitions."""

    definition: TableDefinition
    source: str | None = None
    format: str = DEFAULT_FORMAT
    partitions: tuple[int, ...] | None = None
    """The key partitions this server owns (None: all)."""
    options: Mapping[str, str] = field(default_factory=dict)
    """Options of the changelog reader (``header = "true"`` for CSV ...)."""
    stream: StreamSource | None = None
    """The Redis stream the table reads instead of a directory."""

    @property
    def name(self) -> str:
        return self.definition.name


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """Everything ``horizon ingest`` needs to run one server of many tables (built from a checked
    :class:`ServerFile`, where each key's default and meaning are)."""

    server_id: str
    redis_url: str
    tables: tuple[TableSource, ...]
    prefix: str
    watch_s: float | None
    """Poll the sources this often (None: one pass, then park and exit)."""
    spark_master: str
    spark_conf: Mapping[str, str]
    concurrency: int | None
    """Tables ingesting at once (None: every table, sharing the cores through Spark's FAIR
    scheduler)."""
    heartbeat_s: float
    lock_priority: int


def _partition_list(value: Any) -> Any:
    return [item for item in value.split(",") if item.strip()] if isinstance(value, str) else value


class Placement(BaseModel):
    """Where one ``[[tables]]`` entry's changelog is and which key partitions the server owns."""

    model_config = MODEL_CONFIG

    source: str | None = Field(
        None, description="The changelog directory (default: ``<source_root>/<table name>``)."
    )
    format: str | None = Field(
        None, description="The changelog format (default: the server's ``format``)."
    )
    partitions: Annotated[list[int] | None, BeforeValidator(_partition_list)] = Field(
        None,
        description='The key partitions this server owns, a list or ``"0,1"`` (default: all).',
        json_schema_extra={"rule": "each in 0 .. key_partitions - 1"},
    )
    options: Settings = Field(
        {}, description='Options of the changelog reader (``header = "true"`` for CSV ...).'
    )
    stream: str | None = Field(
        None,
        description="A Redis stream to read instead of a directory, "
        "``redis://host:port/db#stream-key`` (format debezium or json).",
    )
    max_events: int = Field(
        DEFAULT_MAX_EVENTS, ge=1, description="At most this many stream entries a batch."
    )
    stream_field: str | None = Field(
        None,
        description="The stream entry field holding the event (default: ``value``, else the "
        "entry's only field, as Debezium Server's Redis sink writes them).",
    )
    on_stream_trimmed: OnTrimmed = Field(
        OnTrimmed.STOP,
        description="Entries trimmed from the stream before the table read them: ``stop`` fails "
        "the table's passes naming the gap, ``skip`` logs and counts it and reads on.",
    )


class TableFileEntry(Placement):
    """A ``[[tables]]`` entry naming a table definition file."""

    definition: str = Field(description="The table definition file, relative to this file.")


class InlineTableEntry(TableFile, Placement):
    """A ``[[tables]]`` entry holding the table definition's keys inline"""


def _entry_kind(entry: Any) -> str:
    if isinstance(entry, dict):
        return "file" if "definition" in entry else "inline"
    return "file" if isinstance(entry, TableFileEntry) else "inline"


TableEntry = Annotated[
    Annotated[TableFileEntry, Tag("file")] | Annotated[InlineTableEntry, Tag("inline")],
    Discriminator(_entry_kind),
]


class ServerSpark(BaseModel):
    """The server's Spark session."""

    model_config = MODEL_CONFIG

    master: str = Field("local[*]", description="Embedded Spark, or ``spark://host:7077``.")
    conf: Settings = Field({}, description="More Spark settings (``[spark.conf]``).")


class ServerFile(BaseModel):
    """An ingestion server's file: its identity, its state store, and the tables it serves."""

    model_config = MODEL_CONFIG

    server_id: str = Field(
        description="The server's identity: 1-200 of letters, digits and ``_ . : @ -``."
    )
    redis: str = Field(
        min_length=1,
        description="The state store, ``redis://host:6379/0``, or a Sentinel group, "
        "``redis+sentinel://h1:26379,h2:26379/mymaster/0`` (the server follows its failovers). "
        "``?wait_replicas=N&wait_timeout_ms=MS``: announcements, reports and lock grants wait "
        "for N replicas (docs/design/contract/failover.md).",
    )
    prefix: str = Field(DEFAULT_PREFIX, description="The Redis key prefix.")
    watch: float | None = Field(
        None,
        gt=0,
        description="Poll the sources every this many seconds (unset: one pass over every "
        "source, then park and exit).",
    )
    source_root: str | None = Field(
        None, description="A table's default source: ``<source_root>/<table name>``."
    )
    format: str = Field(DEFAULT_FORMAT, description="The default changelog format.")
    storage_root: str | None = Field(None, description="Overrides every table's ``storage_root``.")
    concurrency: int | None = Field(
        None,
        ge=1,
        description="Tables ingesting at once (unset: every table, sharing the cores through "
        "Spark's FAIR scheduler).",
    )
    heartbeat_s: float = Field(1.0, gt=0, description="How often the server beats.")
    lock_priority: int = Field(
        STREAMING_INGESTION_PRIORITY, description="The priority of the server's table locks."
    )
    spark: ServerSpark = Field(ServerSpark.model_validate({}), description="``[spark]``")
    tables: list[TableEntry] = Field(
        min_length=1, description="``[[tables]]``: one entry per table."
    )

    @field_validator("server_id")
    @classmethod
    def _server_id(cls, value: str) -> str:
        with refusing(""):
            return check_server_id(value)

    @field_validator("redis")
    @classmethod
    def _redis(cls, value: str) -> str:
        with refusing(""):
            return check_store_url(value)

    @field_validator("prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        with refusing(""):
            return check_prefix(value)


def load_server_config(path: str | Path, **overrides: Any) -> ServerConfig:
    """Read and check a server configuration file; ``overrides`` (not None) replace its keys."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except OSError as error:
        raise InvalidArgument(f"cannot read server configuration {path}: {error}") from None
    except tomllib.TOMLDecodeError as error:
        raise InvalidArgument(f"server configuration {path} is not valid TOML: {error}") from None
    data.update({key: value for key, value in overrides.items() if value is not None})
    return server_config(data, base=path.parent, origin=str(path))


def server_config(data: Mapping[str, Any], *, base: Path, origin: str) -> ServerConfig:
    """Build and check a configuration from its TOML form (table files relative to ``base``)."""
    server = validated(ServerFile, dict(data), source=origin)
    tables, problems = [], []
    for number, entry in enumerate(server.tables, 1):
        try:
            tables.append(_table(entry, server, base))
        except HorizonError as error:
            problems.append(f"[[tables]] #{number} ({_label(entry)}): {error}")
    problems += duplicate_tables(tables)
    if problems:
        raise InvalidArgument(f"{origin}: " + "; ".join(problems))
    return ServerConfig(
        server_id=server.server_id,
        redis_url=server.redis,
        tables=tuple(tables),
        prefix=server.prefix,
        watch_s=server.watch,
        spark_master=server.spark.master,
        spark_conf=_strings(server.spark.conf),
        concurrency=server.concurrency,
        heartbeat_s=server.heartbeat_s,
        lock_priority=server.lock_priority,
    )


def duplicate_tables(tables: Sequence[TableSource]) -> list[str]:
    """A problem for each table listed more than once (names compare case-insensitively)."""
    seen: dict[str, int] = {}
    for table in tables:
        seen[table.name.lower()] = seen.get(table.name.lower(), 0) + 1
    return [f"table {name!r} is listed {count} times" for name, count in seen.items() if count > 1]


def _table(entry: TableFileEntry | InlineTableEntry, server: ServerFile, base: Path) -> TableSource:
    if isinstance(entry, TableFileEntry):
        definition = TableDefinition.load(base / entry.definition, storage_root=server.storage_root)
    else:
        definition = entry.definition()
        if server.storage_root:
            definition = dataclasses.replace(definition, storage_root=server.storage_root)
    source = entry.source
    stream = None
    if entry.stream is not None:
        if source is not None:
            raise InvalidArgument("give source (a directory) or stream (a Redis stream), not both")
        stream = stream_source(
            entry.stream,
            entry.format or server.format,
            max_events=entry.max_events,
            field=entry.stream_field,
            on_trimmed=entry.on_stream_trimmed,
        )
    elif {"max_events", "stream_field", "on_stream_trimmed"} & entry.model_fields_set:
        raise InvalidArgument(
            "max_events, stream_field and on_stream_trimmed apply to a table read from a stream"
        )
    elif source is None and server.source_root:
        source = f"{server.source_root.rstrip('/')}/{definition.name}"
    partitions = entry.partitions
    return TableSource(
        definition=definition,
        source=source,
        format=entry.format or server.format,
        partitions=None if partitions is None else owned_partitions(partitions, definition),
        options=_strings(entry.options),
        stream=stream,
    )


def owned_partitions(raw: Any, definition: TableDefinition) -> tuple[int, ...]:
    """Key partitions as a sorted tuple: a list of integers or a ``"0,1"`` string, each within
    the table's ``key_partitions``."""
    items = raw.split(",") if isinstance(raw, str) else raw
    if not isinstance(items, list | tuple):
        raise InvalidArgument(f"partitions must be a list of integers, got {raw!r}")
    try:
        numbers = sorted({int(str(item).strip()) for item in items if str(item).strip()})
    except ValueError:
        raise InvalidArgument(f"partitions must be integers, got {raw!r}") from None
    outside = [p for p in numbers if not 0 <= p < definition.key_partitions]
    if outside or not numbers:
        raise InvalidArgument(
            f"partitions {outside or raw!r} are not key partitions of the table "
            f"(it has {definition.key_partitions}: 0 to {definition.key_partitions - 1})"
        )
    return tuple(numbers)


def _label(entry: TableFileEntry | InlineTableEntry) -> str:
    if isinstance(entry, TableFileEntry):
        return f"file {entry.definition}"
    return f"table {entry.name!r}"


def _strings(settings: Settings) -> dict[str, str]:
    return {str(key): str(value) for key, value in settings.items()}
