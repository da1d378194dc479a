"""Every Spark session the broker runs queries on reads a literal as written.

Spark's variable substitution (``spark.sql.variable.substitute``, on by default) replaces
``${env:NAME}``, ``${system:NAME}`` and ``${some.setting}`` in a query's text before parsing it,
inside string literals too: a caller could read the broker's environment (its tokens, the state
store's password) or, because a ``${...}`` that vanishes moves where Spark sees a literal end,
make Spark parse SQL the rewriter never checked. So each session is told to leave the text alone
and then *checked* with a query that would show any substitution; a session that still
substitutes (a Spark Connect server that refuses the setting) is refused at start-up.
"""

from __future__ import annotations

from typing import Any

from horizon_broker._core.errors import FailedPrecondition

LITERAL_CONF: dict[str, str] = {
    "spark.sql.variable.substitute": "false",
    # ``\u0024`` in a literal must be read as ``$`` (horizon_broker.broker.sql.sealing writes it so).
    "spark.sql.parser.escapedStringLiterals": "false",
}
_PROBE = "${spark.app.name}"
_PROBE_SQL = "SELECT '${spark.app.name}' AS written, '\\u0024{x}' AS escaped"


def keep_literals(session: Any) -> None:
    """Turn substitution off in ``session`` and prove it: FailedPrecondition if a literal holding
    ``${...}`` does not come back exactly as written."""
    try:
        for key, value in LITERAL_CONF.items():
            session.conf.set(key, value)
        row = session.sql(_PROBE_SQL).collect()[0]
    except Exception as error:
        raise FailedPrecondition(
            "the Spark session refused to turn off variable substitution "
            f"(spark.sql.variable.substitute = false): {type(error).__name__}; Horizon does not "
            "run queries on a session that rewrites ${...} in their text"
        ) from None
    if (row[0], row[1]) != (_PROBE, "${x}"):
        raise FailedPrecondition(
            "the Spark session still substitutes ${...} in SQL text after "
            "spark.sql.variable.substitute = false was set (a literal came back changed); "
            "Horizon does not run queries on it: turn substitution off on the server"
        )
