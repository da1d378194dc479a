"""The configuration files' schema machinery: one way to declare, check, override and document a
file's keys, shared by the broker's file, the table definitions and the ingestion server's file.

The schemas are pydantic v2 models rather than msgspec structs: pydantic declares a constraint on
the field it limits (``Field(ge=1)``), exports the JSON Schema editors read, and reports every
problem with its location (section, key, entry), which is what one error style needs; the files
are read once at start-up, so msgspec's speed would buy nothing.

- :mod:`.schema`: the model settings (``extra="forbid"``, frozen), :class:`Rule` for the rules a
  constraint cannot say, and :func:`validated`, which turns pydantic's errors into one
  :class:`~horizon_broker._core.errors.InvalidArgument`.
- :mod:`.messages`: that error's form, ``file: [section] key: rule (got value)``.
- :mod:`.environment`: ``HORIZON_<SECTION>_<KEY>`` overrides.
- :mod:`.reference`: a model's keys as Markdown tables (the generated configuration reference).
"""

from horizon_broker._config.schema import (
    MODEL_CONFIG,
    Rule,
    RuleNote,
    Section,
    fields_of,
    json_schema,
    refusing,
    section,
    validated,
)

__all__ = [
    "MODEL_CONFIG",
    "Rule",
    "RuleNote",
    "Section",
    "fields_of",
    "json_schema",
    "refusing",
    "section",
    "validated",
]
