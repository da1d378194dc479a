"""The configuration reference page is generated from the models (``make config-reference``):
the committed page is exactly what the models say, so it cannot drift from them."""

from __future__ import annotations

from pathlib import Path

from horizon_broker._config import fields_of
from horizon_broker.broker.config import SECTIONS
from horizon_broker.broker.config_reference import FILES, markdown
from horizon_broker.broker.config_tokens import TokenEntry

PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "configuration.md"


def test_the_committed_configuration_reference_is_the_generated_one():
    assert PAGE.read_text() == markdown(), "run `make config-reference` and commit the page"


def test_the_reference_lists_every_key_of_the_three_files():
    page = markdown()
    models = [*SECTIONS.values(), TokenEntry, FILES["table"], FILES["server"]]
    missing = [
        f"{model.__name__}.{key}"
        for model in models
        for key in fields_of(model)
        if f"| `{key}` |" not in page
    ]
    assert set(missing) <= {"ServerFile.spark", "ServerFile.tables"}, missing  # own sections
