"""Snapshot tokens: an opaque, mergeable "at least this snapshot of these tables".

An ingestion batch hands one out for the commit it made visible (read-your-writes); every query
answer carries one for the snapshot it read (monotonic reads). A client keeps the highest it has
seen per table (:func:`merge`) and sends it back; a broker then never reads those tables below it.
Pure; the text form is ``hz1.`` + URL-safe base64 of a small JSON object, table names lowercased
(tables resolve case-insensitively, like SQL). Several tokens may travel as one string, separated
by commas (a ``min_snapshot`` of several batches of several tables): they read as their merge.

>>> token = encode({"Accounts": 42})
>>> decode(merge(token, encode({"accounts": 7, "orders": 9})))
{'accounts': 42, 'orders': 9}
>>> decode(token + "," + encode({"orders": 9})) == decode(merge(token, encode({"orders": 9})))
True
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping

from horizon_broker._core.errors import InvalidArgument

PREFIX = "hz1."
MAX_TOKEN_LENGTH = 1_000_000
"""Generous: a long-lived client session names every table it ever read."""
_MAX_HLC = 2**63 - 1


def encode(snapshots: Mapping[str, int]) -> str:
    """The token for ``{table: snapshot}`` (empty string for no tables)."""
    merged: dict[str, int] = {}
    for table, snapshot in snapshots.items():
        key = table.lower()
        merged[key] = max(int(snapshot), merged.get(key, 0))
    if not merged:
        return ""
    body = json.dumps(dict(sorted(merged.items())), separators=(",", ":")).encode()
    return PREFIX + base64.urlsafe_b64encode(body).decode().rstrip("=")


def decode(token: str) -> dict[str, int]:
    """``{table: snapshot}`` of a token (or of comma-separated tokens: their merge); the empty
    token is no constraint. A malformed one is an InvalidArgument that says so (it was not made
    by Horizon, or was cut)."""
    if not token:
        return {}
    if isinstance(token, str) and "," in token and len(token) <= MAX_TOKEN_LENGTH:
        return decode(merge(*(part.strip() for part in token.split(","))))
    if not isinstance(token, str) or len(token) > MAX_TOKEN_LENGTH or not token.startswith(PREFIX):
        raise InvalidArgument(
            f"{_shown(token)} is not a Horizon snapshot token (they start with {PREFIX!r}, "
            "as returned by an ingestion batch or a query)"
        )
    text = token[len(PREFIX) :]
    try:
        data = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise InvalidArgument(f"snapshot token {_shown(token)} is corrupt") from None
    if not isinstance(data, dict) or not all(
        isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= _MAX_HLC
        for k, v in data.items()
    ):
        raise InvalidArgument(f"snapshot token {_shown(token)} is corrupt")
    return {k.lower(): v for k, v in data.items()}


def merge(*tokens: str) -> str:
    """One token at least as high as each of ``tokens``, table by table."""
    merged: dict[str, int] = {}
    for token in tokens:
        for table, snapshot in decode(token).items():
            merged[table] = max(snapshot, merged.get(table, 0))
    return encode(merged)


def _shown(token: object) -> str:
    text = repr(token)
    return text if len(text) <= 40 else text[:37] + "..."
