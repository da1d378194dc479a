"""The three configuration files' one schema library: every problem named by file, section, key
and rule; environment overrides in one form; deprecated aliases; the JSON Schemas editors read."""

from __future__ import annotations

import io
import json
import logging
import re
import tomllib
from contextlib import redirect_stdout
from pathlib import Path

import jsonschema
import pytest

from horizon_broker._core.errors import InvalidArgument
from horizon_broker.broker.config import config_from_mapping, load_config
from horizon_broker.broker.config_reference import schema
from horizon_broker.cli import main
from horizon_broker.ingest.server_config import server_config
from horizon_broker.ingest.table import TableDefinition

ROOT = Path(__file__).resolve().parents[2]
BROKER_TOML = """
[server]
listen = "127.0.0.1:50051"
[state]
redis_url = "redis://127.0.0.1:6379/0"
[spark]
master = "local[*]"
[spark.conf]
"spark.sql.shuffle.partitions" = "8"
[limits]
max_concurrent = 4
[reads]
cache_max_bytes = 268435456
[console]
allowed_hosts = "console.example.org"
[[tokens]]
name = "analyst"
token = "s3cret"
tables = ["orders"]
inspect = true
"""
SERVER_TOML = """
server_id = "ingest-1"
redis = "redis://127.0.0.1:6379/0"
watch = 5
source_root = "/landing"
[spark]
master = "local[*]"
[spark.conf]
"spark.driver.memory" = "4g"
[[tables]]
definition = "orders.toml"
partitions = [0, 1]
[[tables]]
name = "inline"
primary_key = ["id"]
[tables.columns]
id = "bigint"
"""


def guide_table_toml() -> str:
    """The table definition the ingestion guide shows a user."""
    text = (ROOT / "docs" / "guides" / "ingestion.md").read_text()
    match = re.search(r"```toml\n(.*?)```", text, re.S)
    assert match is not None
    return match.group(1)


def test_a_bad_broker_file_names_the_file_section_key_and_rule_of_every_problem(tmp_path):
    path = tmp_path / "broker.toml"
    path.write_text("[limits]\nmax_concurrent = 0\n[server]\nlistn = '127.0.0.1:1'\n")
    with pytest.raises(InvalidArgument) as refused:
        load_config(path, env={})
    assert str(refused.value) == (
        f"{path}: [server] listn: unknown key: did you mean 'listen'?; "
        "[limits] max_concurrent: must be >= 1 (got 0)"
    )


def test_table_and_server_files_refuse_in_the_same_form():
    with pytest.raises(InvalidArgument) as table:
        TableDefinition.from_toml("surprise = 1\n" + guide_table_toml(), source="accounts.toml")
    assert (
        str(table.value)
        == "accounts.toml: surprise: unknown key (known: "
        + ", ".join(schema("table")["properties"])
        + ")"
    )
    data = tomllib.loads(SERVER_TOML) | {"heartbeat_s": 0}
    with pytest.raises(InvalidArgument) as server:
        server_config(data, base=Path("."), origin="server.toml")
    assert str(server.value) == "server.toml: heartbeat_s: must be > 0.0 (got 0)"


def test_an_environment_variable_overrides_the_file_and_is_named_when_it_is_wrong():
    data = {"limits": {"max_concurrent": 2}, "spark": {"remote": "sc://x:15002"}}
    config = config_from_mapping(
        data, env={"HORIZON_LIMITS_MAX_CONCURRENT": "7", "HORIZON_SPARK_REMOTE": ""}
    )
    assert config.limits.max_concurrent == 7
    assert config.spark.remote is None, "an empty variable unsets an optional key"
    with pytest.raises(InvalidArgument) as refused:
        config_from_mapping(data, env={"HORIZON_LIMITS_MAX_CONCURRENT": "0"}, source="b.toml")
    assert str(refused.value) == (
        "HORIZON_LIMITS_MAX_CONCURRENT ([limits] max_concurrent): must be >= 1 (got '0')"
    )


def test_a_deprecated_alias_is_read_as_its_key_with_a_warning(caplog):
    text = guide_table_toml().replace('retention = "7d"', "retention_ms = 604800000")
    with caplog.at_level(logging.WARNING):
        table = TableDefinition.from_toml(text)
    assert table.retention_ms == 7 * 86_400_000
    assert "retention_ms is deprecated" in caplog.text
    with pytest.raises(InvalidArgument, match="upsert: unknown key: it is now 'mode'"):
        TableDefinition.from_toml("upsert = true\n" + guide_table_toml())


@pytest.mark.parametrize(
    ("name", "text"),
    [("broker", BROKER_TOML), ("table", guide_table_toml()), ("server", SERVER_TOML)],
)
def test_the_exported_json_schema_accepts_a_real_file_and_refuses_an_unknown_key(name, text):
    validator = jsonschema.Draft202012Validator(schema(name))
    data = tomllib.loads(text)
    validator.validate(data)
    with pytest.raises(jsonschema.ValidationError, match="surprise"):
        validator.validate({**data, "surprise": 1})


def test_horizon_config_schema_prints_the_files_json_schema():
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["config", "schema", "table"]) == 0
    assert json.loads(out.getvalue()) == schema("table")


@pytest.mark.parametrize("spelling", ["hour", "HOUR"])
def test_the_exported_table_schema_accepts_a_granularity_in_the_cases_the_loader_reads(spelling):
    text = re.sub(r"(?m)^granularity = .*$", "", guide_table_toml())
    text = f'granularity = "{spelling}"\n' + text
    assert TableDefinition.from_toml(text).granularity.value == "HOUR"
    jsonschema.Draft202012Validator(schema("table")).validate(tomllib.loads(text))
