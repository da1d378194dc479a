"""What an ingestion server checks before it writes anything (read-only).

A server starting with many tables must refuse a bad configuration whole, before it registers,
claims or announces: a table whose definition differs from the one already registered, or whose
key partitions another live server owns, would otherwise leave some tables started and others not.
Each problem names the table and what is wrong; :func:`problems` lists them all.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from horizon_broker._core.keys import Keys
from horizon_broker.ingest import debezium
from horizon_broker.ingest.schema_follow import same_but_columns
from horizon_broker.ingest.server_config import TableSource, duplicate_tables
from horizon_broker.watermark.catalog import TableDescriptor
from horizon_broker.watermark.server import ServerClient


def problems(
    client: ServerClient, tables: Sequence[TableSource], served: Iterable[str] = ()
) -> list[str]:
    """Every reason to refuse serving ``tables`` (besides ``served``, the ones already served)."""
    found = duplicate_tables(tables)
    already = {name.lower() for name in served}
    for table in tables:
        name = table.name
        if name.lower() in already:
            found.append(f"table {name!r} is already served by this server")
            continue
        if table.format == debezium.FORMAT:
            found += debezium.table_problems(table.definition)
        problem = definition_conflict(client, table.definition.descriptor())
        if problem:
            found.append(problem)
        wanted = set(table.partitions or range(table.definition.key_partitions))
        taken = {p: owner for p, owner in client.live_owners(name).items() if p in wanted}
        if taken:
            owners = sorted(set(taken.values()))
            found.append(
                f"table {name!r}: key partitions {', '.join(map(str, sorted(taken)))} are owned "
                f"by live server {', '.join(owners)} (it must hand them over or stop first)"
            )
    return found


def definition_conflict(client: ServerClient, descriptor: TableDescriptor) -> str | None:
    """Why ``descriptor`` cannot be registered (another definition is), or None."""
    text = client.redis.hget(Keys(client.prefix).tables, descriptor.name)
    if text is None:
        return None
    existing = TableDescriptor.from_json(text.decode() if isinstance(text, bytes) else text)
    if existing == descriptor or same_but_columns(existing, descriptor):
        return None  # columns alone: the server applies the file's schema change at start
    differences = [
        item.name
        for item in dataclasses.fields(TableDescriptor)
        if item.compare and getattr(existing, item.name) != getattr(descriptor, item.name)
    ]
    what = ", ".join(differences) or "its definition"
    return (
        f"table {descriptor.name!r} is already registered with a different definition "
        f"(differs in {what}); a table's definition cannot change under its readers"
    )
