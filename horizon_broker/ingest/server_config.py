"""What one ingestion server runs: its identity, its state store, and the tables it serves.

Loaded from a TOML file (``horizon ingest --config server.toml``) or built from ``--table``
options, and checked whole before the server writes anything: every table file must load, no
table may be listed twice, and the key partitions must exist. All problems are reported at once,
each naming the table and where it was declared::

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
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from horizon_broker._core.errors import HorizonError, InvalidArgument
from horizon_broker._core.keys import DEFAULT_PREFIX, check_prefix, check_server_id
from horizon_broker.ingest.table import TableDefinition
from horizon_broker.locks.rules import STREAMING_INGESTION_PRIORITY

SERVER_KEYS = frozenset(
    {
        "server_id", "redis", "prefix", "watch", "source_root", "format", "storage_root",
        "concurrency", "heartbeat_s", "lock_priority", "spark", "tables",
    }
)  # fmt: skip
TABLE_KEYS = frozenset({"definition", "source", "format", "partitions", "options"})


@dataclass(frozen=True, slots=True)
class TableSource:
    """One table a server serves: its definition, where its changelog lands, which partitions."""

    definition: TableDefinition
    source: str | None = None
    format: str = "json"
    partitions: tuple[int, ...] | None = None
    """The key partitions this server owns (None: all)."""
    options: Mapping[str, str] = field(default_factory=dict)
    """Options of the changelog reader (``header = "true"`` for CSV ...)."""

    @property
    def name(self) -> str:
        return self.definition.name


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """Everything ``horizon ingest`` needs to run one server of many tables."""

    server_id: str
    redis_url: str
    tables: tuple[TableSource, ...]
    prefix: str = DEFAULT_PREFIX
    watch_s: float | None = None
    """Poll the sources this often (None: one pass, then park and exit)."""
    spark_master: str = "local[*]"
    spark_conf: Mapping[str, str] = field(default_factory=dict)
    concurrency: int | None = None
    """Tables ingesting at once (None: every table, sharing the cores through Spark's FAIR
    scheduler)."""
    heartbeat_s: float = 1.0
    lock_priority: int = STREAMING_INGESTION_PRIORITY


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
    unknown = sorted(set(data) - SERVER_KEYS)
    if unknown:
        raise InvalidArgument(f"{origin}: unknown keys {', '.join(unknown)}")
    for key in ("server_id", "redis"):
        if not data.get(key):
            raise InvalidArgument(f"{origin}: {key} is missing")
    server_id = check_server_id(str(data["server_id"]))
    entries = data.get("tables") or []
    if not isinstance(entries, list) or not entries:
        raise InvalidArgument(f"{origin}: no tables: add a [[tables]] entry per table")
    tables, problems = [], []
    for number, entry in enumerate(entries, 1):
        try:
            tables.append(_table(entry, data, base))
        except HorizonError as error:
            problems.append(f"table {_label(entry, number)}: {error}")
    problems += duplicate_tables(tables)
    if problems:
        raise InvalidArgument(f"{origin}: " + "; ".join(problems))
    spark = data.get("spark") or {}
    watch = data.get("watch")
    return ServerConfig(
        server_id=server_id,
        redis_url=str(data["redis"]),
        tables=tuple(tables),
        prefix=check_prefix(str(data.get("prefix", DEFAULT_PREFIX))),
        watch_s=_positive(watch, "watch", origin) if watch is not None else None,
        spark_master=str(spark.get("master", "local[*]")),
        spark_conf={str(k): str(v) for k, v in (spark.get("conf") or {}).items()},
        concurrency=_count(data.get("concurrency"), origin),
        heartbeat_s=_positive(data.get("heartbeat_s", 1.0), "heartbeat_s", origin),
        lock_priority=int(data.get("lock_priority", STREAMING_INGESTION_PRIORITY)),
    )


def duplicate_tables(tables: Sequence[TableSource]) -> list[str]:
    """A problem for each table listed more than once (names compare case-insensitively)."""
    seen: dict[str, int] = {}
    for table in tables:
        seen[table.name.lower()] = seen.get(table.name.lower(), 0) + 1
    return [f"table {name!r} is listed {count} times" for name, count in seen.items() if count > 1]


def _table(entry: Any, server: Mapping[str, Any], base: Path) -> TableSource:
    if not isinstance(entry, dict):
        raise InvalidArgument("each [[tables]] entry must be a table of keys")
    storage_root = server.get("storage_root")
    if "definition" in entry:
        unknown = sorted(set(entry) - TABLE_KEYS)
        if unknown:
            raise InvalidArgument(f"unknown keys {', '.join(unknown)}")
        definition = TableDefinition.load(
            base / str(entry["definition"]), storage_root=storage_root
        )
    else:
        inline = {k: v for k, v in entry.items() if k not in TABLE_KEYS}
        definition = TableDefinition.from_dict(inline, storage_root=storage_root)
    source = entry.get("source")
    if source is None and server.get("source_root"):
        source = f"{str(server['source_root']).rstrip('/')}/{definition.name}"
    partitions = entry.get("partitions")
    return TableSource(
        definition=definition,
        source=None if source is None else str(source),
        format=str(entry.get("format", server.get("format", "json"))),
        partitions=None if partitions is None else owned_partitions(partitions, definition),
        options={str(k): str(v) for k, v in (entry.get("options") or {}).items()},
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


def _label(entry: Any, number: int) -> str:
    if isinstance(entry, dict):
        if "definition" in entry:
            return f"file {entry['definition']}"
        if "name" in entry:
            return repr(entry["name"])
    return f"#{number}"


def _positive(value: Any, name: str, origin: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = -1.0
    if not number > 0:
        raise InvalidArgument(f"{origin}: {name} must be a positive number of seconds")
    return number


def _count(value: Any, origin: str) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidArgument(f"{origin}: concurrency must be a positive integer")
    return value
