"""The three configuration files' schemas as the editors' JSON Schemas and as the generated
reference page, docs/reference/configuration.md (``make config-reference`` writes it; a test
checks the committed page equals :func:`markdown`, so it cannot drift from the models)."""

from __future__ import annotations

from typing import Any

from horizon_broker._config import json_schema
from horizon_broker._config.reference import section_markdown
from horizon_broker.broker.config import SECTIONS, BrokerConfig
from horizon_broker.broker.config_tokens import TokenEntry
from horizon_broker.ingest.server_config import (
    InlineTableEntry,
    Placement,
    ServerFile,
    ServerSpark,
    TableFileEntry,
)
from horizon_broker.ingest.table import TableFile

FILES: dict[str, Any] = {"broker": BrokerConfig, "table": TableFile, "server": ServerFile}
"""Each file's model, by the name ``horizon config schema`` takes."""

_INTRO = """\
# Configuration

<!-- Generated from the models by `make config-reference`
(horizon_broker.broker.config_reference.markdown): edit the models' Field descriptions, not this
page. tests/packaging/test_config_reference.py checks the two agree. -->

Horizon reads three TOML files, each checked whole when it is loaded: an unknown key, a value of
the wrong type or one outside its rule is refused with one error naming the file, the section, the
key and the rule, every problem at once:

```text
broker.toml: [server] listn: unknown key: did you mean 'listen'?; [limits] max_concurrent: must be >= 1 (got 0)
```

- [The broker's file](#the-brokers-file) (`horizon serve --config broker.toml`, or
  `HORIZON_CONFIG`), every key optional.
- [A table definition](#a-table-definition) (`horizon ingest --table orders.toml`).
- [An ingestion server's file](#an-ingestion-servers-file) (`horizon ingest --config server.toml`).

Editors that read JSON Schema (VS Code's Even Better TOML, taplo, IntelliJ) can check and complete
the files: `horizon config schema broker|table|server > broker.schema.json` prints each file's.
"""

_BROKER = """\
# The broker's file

Every key may be overridden by an environment variable `HORIZON_<SECTION>_<KEY>`
(`HORIZON_SERVER_LISTEN=0.0.0.0:50051`, `HORIZON_LIMITS_MAX_CONCURRENT=8`), which wins over the
file. A value is the text the file would hold (`8`, `2.5`, `true`/`yes`/`on`/`1`); an empty value
unsets an optional key; the structured keys take JSON: `HORIZON_SPARK_CONF` (a table of Spark
settings) and `HORIZON_TOKENS` (the `[[tokens]]` array). An error in a variable names it:
`HORIZON_LIMITS_MAX_CONCURRENT ([limits] max_concurrent): must be >= 1 (got '0')`.
"""

_TABLE = """\
# A table definition

One file per table, its keys at the top level and its columns in `[columns]`. Each key has one
spelling: `retention_ms` and `gc_grace_ms` (milliseconds) are deprecated aliases of `retention`
and `gc_grace`, accepted with a warning; `upsert` and `comparison_columns` are refused, naming
`mode` and `comparison`.
"""

_SERVER = """\
# An ingestion server's file

The server's own keys at the top level, `[spark]`, and one `[[tables]]` entry per table: either
`definition = "orders.toml"` (a table definition file, relative to this one) or the definition's
keys inline, each with the placement keys below. The command line's options (`--redis`,
`--server-id`, `--watch`...) override the file's keys.
"""


def schema(name: str) -> dict[str, Any]:
    """The JSON Schema of one file (``broker``, ``table`` or ``server``)."""
    return json_schema(FILES[name])


def markdown() -> str:
    """The configuration reference page, every key of the three files."""
    lines = [_INTRO, _BROKER]
    for name, kind in SECTIONS.items():
        skip = ("conf",) if name == "spark" else ()
        lines += section_markdown(f"`[{name}]`", kind, skip=skip)
        if name == "spark":
            lines += ['`[spark.conf]`: more Spark settings, `"spark.key" = "value"`.', ""]
    lines += section_markdown("`[[tokens]]`", TokenEntry)
    lines += [_TABLE, *section_markdown("The table's keys", TableFile)]
    lines += [_SERVER, *section_markdown("The server's keys", ServerFile, skip=("spark", "tables"))]
    lines += section_markdown("`[spark]`", ServerSpark)
    lines += section_markdown("`[[tables]]`", Placement)
    lines += section_markdown("`[[tables]]` naming a file", TableFileEntry, skip=_placement())
    lines += [
        f"{InlineTableEntry.__doc__}: the table's keys above, besides the placement keys.",
        "",
    ]
    return "\n".join(lines).rstrip() + "\n"


def _placement() -> tuple[str, ...]:
    return tuple(Placement.__pydantic_fields__)


if __name__ == "__main__":
    print(markdown(), end="")
