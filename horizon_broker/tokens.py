"""Snapshot tokens: "at least this snapshot of these tables", opaque, mergeable.

Every ingestion batch returns one for the commit it made visible (``BatchResult.token``), an
ingestion server's :meth:`~horizon.IngestServer.token` covers every table it serves, and every
query answer carries one for the snapshot it read. Send one (or several) as a query's
``min_snapshot`` and the broker reads every table it names at that snapshot or later, waiting
within the call's deadline if it must (read-your-writes, monotonic reads).

>>> a = encode({"orders": 42})
>>> b = encode({"customer": 7, "orders": 9})
>>> snapshots(merge(a, b))
{'customer': 7, 'orders': 42}
>>> snapshots(merge([a, b])) == snapshots(f"{a},{b}")
True
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from horizon_broker.watermark import tokens as _tokens

__all__ = ["encode", "merge", "snapshots"]


def merge(*tokens: str | Iterable[str]) -> str:
    """One token at least as high as each of ``tokens``, table by table (tokens, or lists of
    them; the empty token adds nothing)."""
    flat: list[str] = []
    for item in tokens:
        flat.extend([item] if isinstance(item, str) else item)
    return _tokens.merge(*flat)


def snapshots(token: str) -> dict[str, int]:
    """``{table: snapshot}`` a token names (lowercase table names); malformed: InvalidArgument."""
    return _tokens.decode(token)


def encode(snapshots: Mapping[str, int]) -> str:
    """The token for ``{table: snapshot}`` (say, read at a snapshot seen elsewhere)."""
    return _tokens.encode(snapshots)
