"""Schema changes in the state store: one atomic step that replaces a table's registered
descriptor by one with a new schema version, effective above every snapshot already read.

The schema versions live inside the table's descriptor (``{p}:tables``), so a change and the
table's registration are one value: a reader never sees one without the other, and the broker's
follower picks the change up from the log event like any registration. The step is a
compare-and-set on the descriptor it was computed from (two concurrent alters: the second is
computed again from the first's result), and applying a change already in effect does nothing,
so retrying an alter is safe. An ingestion server reads the descriptor before each batch
(:func:`registered_descriptor`) and moves its clock above the newest version's timestamp, so
every batch written under the new schema commits after the version took effect.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis

from horizon_broker._core.errors import FailedPrecondition, NotFound
from horizon_broker._core.hlc import HybridLogicalClock
from horizon_broker._core.keys import DEFAULT_PREFIX, Keys, padded_hlc
from horizon_broker._core.redis_calls import retrying
from horizon_broker.watermark.catalog import TableDescriptor
from horizon_broker.watermark.connection import Execute, StoreConnection
from horizon_broker.watermark.schema_rules import KeyRoles, SchemaChange, apply_changes
from horizon_broker.watermark.schema_versions import SchemaVersion

_ATTEMPTS = 20
_READ_RETRY_S = 30.0
"""How long a schema read retries a lost connection before it fails UNAVAILABLE."""


@dataclass(frozen=True, slots=True)
class AlterOutcome:
    descriptor: TableDescriptor
    changed: bool
    """False when every change was already in effect (nothing was written)."""

    @property
    def version(self) -> SchemaVersion:
        return self.descriptor.schema_history.current


def key_roles(descriptor: TableDescriptor) -> KeyRoles:
    """The columns of ``descriptor`` that have a role in its definition."""
    properties = descriptor.properties
    others = [*descriptor.comparison_columns]
    others += [name for name in (descriptor.time_column,) if name]
    others += [properties[k] for k in ("delete_column", "transaction_column") if properties.get(k)]
    return KeyRoles(descriptor.primary_key, tuple(others))


def registered_descriptor(
    client: redis.Redis, table: str, prefix: str = DEFAULT_PREFIX
) -> TableDescriptor | None:
    """The table's registered descriptor (None: not registered). A lost connection, or one
    that reached a new primary, is retried: a batch reads this on every run, and a failover must
    not end the ingestion server (its next script call re-publishes first, rule F4)."""
    text: Any = retrying(
        lambda: client.hget(Keys(prefix).tables, table),
        _READ_RETRY_S,
        f"Redis is unreachable reading table {table!r}'s schema",
    )
    if text is None:
        return None
    return TableDescriptor.from_json(text.decode() if isinstance(text, bytes) else text)


def alter_table(
    redis_: str | redis.Redis,
    table: str,
    changes: Sequence[SchemaChange],
    *,
    prefix: str = DEFAULT_PREFIX,
    clock: HybridLogicalClock | None = None,
) -> AlterOutcome:
    """Apply ``changes`` to ``table``'s schema as one new version (refused whole if any change
    breaks a rule, see :mod:`horizon_broker.watermark.schema_rules`)."""
    clock = clock or HybridLogicalClock()
    store = StoreConnection(redis_, f"alter-{uuid.uuid4().hex[:8]}", Keys(prefix), _nothing)
    try:
        for _ in range(_ATTEMPTS):
            text = store.read(lambda r: r.hget(Keys(prefix).tables, table))
            if text is None:
                raise NotFound(
                    f"table {table!r} is not registered (an ingestion server registers it)"
                )
            descriptor = TableDescriptor.from_json(text)
            effective = clock.now()
            history = apply_changes(
                descriptor.schema_history, changes, key_roles(descriptor), effective
            )
            if history == descriptor.schema_history:
                return AlterOutcome(descriptor, changed=False)
            altered = descriptor.with_schema(history)
            reply = store.run(
                "ALTER_TABLE", [table, text, altered.to_json(), padded_hlc(effective)]
            )
            if reply[0] == "DONE":
                return AlterOutcome(altered, changed=True)
            if reply[0] == "STALE":
                clock.observe(int(reply[1]))
        raise FailedPrecondition(
            f"table {table!r}: the schema change kept meeting concurrent changes; try again"
        )
    finally:
        store.close()


def _nothing(execute: Execute) -> None:
    """A schema change has nothing of its own to publish again into a Redis that lost its data."""
