"""Resume tokens: where a subscription's stream stands, for a new call to go on from there.

``hzs1.<query fingerprint>.<snapshot token>``: the snapshot token (:mod:`horizon_broker.tokens`)
names the snapshot of every table the query reads that the last delta brought the subscriber to
(its ``to``); the fingerprint is of the query's text without its snapshot clause, so a token is
refused for another query (its deltas would not apply to what the subscriber holds). Pure.

>>> token = encode("SELECT * FROM t", {"t": 42})
>>> decode(token, "select *  from t VERSION AS OF 7")
42
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from horizon_broker._core.errors import InvalidArgument
from horizon_broker.watermark import tokens

PREFIX = "hzs1."


def fingerprint(sql: str) -> str:
    """16 hex digits naming the query whatever its spacing, case of keywords or start clause."""
    try:
        tree = sqlglot.parse_one(sql, read="spark")
        for table in tree.find_all(exp.Table):
            table.set("version", None)
        text = tree.sql(dialect="spark", normalize=True)
    except SqlglotError:
        text = " ".join(sql.split())
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def encode(sql: str, snapshots: Mapping[str, int]) -> str:
    """The token to resume ``sql``'s stream after a delta that reached ``snapshots``."""
    return f"{PREFIX}{fingerprint(sql)}.{tokens.encode(snapshots)}"


def decode(token: str, sql: str) -> int:
    """The snapshot a stream of ``sql`` resumes after (INVALID_ARGUMENT: not a resume token, or
    one of another query)."""
    parts = token.split(".", 2) if token.startswith(PREFIX) else []
    if len(parts) != 3:
        raise InvalidArgument(
            f"{token[:40]!r} is not a subscription resume token (they start with {PREFIX!r}, "
            "as the messages of Subscribe carry them)"
        )
    if parts[1] != fingerprint(sql):
        raise InvalidArgument(
            "the resume token was given for another query: send the same SQL the stream was "
            "started with"
        )
    snapshots = tokens.decode(parts[2])
    if not snapshots:
        raise InvalidArgument("the resume token names no snapshot")
    return min(snapshots.values())
