"""The table definition the command-line tests write to a TOML file."""

TABLE = """
name = "accounts"
primary_key = ["user_id"]
comparison = ["seq"]
delete_column = "deleted"
key_partitions = 2

[columns]
user_id = "string"
balance = "bigint"
seq = "bigint"
deleted = "boolean"
"""
