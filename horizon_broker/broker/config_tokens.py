"""The broker file's ``[[tokens]]`` entries: each an identity, checked as the file's other
sections are and turned into the :class:`~horizon_broker.broker.grants.TokenGrant` the
authenticator holds."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, Field, PlainValidator, TypeAdapter, model_validator

from horizon_broker._config import MODEL_CONFIG, Rule
from horizon_broker.broker.grants import ALL_TABLES, TokenGrant


class TokenEntry(BaseModel):
    """An identity and what it may do. A caller proves it is ``name`` with the bearer ``token``,
    or (mutual TLS) with a client certificate whose common name is ``client_cn``; one of the
    two is required. No ``[[tokens]]`` at all: the broker is open, and serves loopback only."""

    model_config = MODEL_CONFIG

    name: str | None = Field(
        None,
        description="The identity (unique; it owns pins and quotas). Unset: ``token<n>``, "
        "``n`` the entry's place from 0.",
    )
    token: str = Field("", description="The bearer token's secret (unique).")
    client_cn: str = Field(
        "",
        description="A client certificate's common name (mutual TLS, ``[server] tls_client_ca``).",
    )
    tables: list[str] = Field(
        [ALL_TABLES], description='The tables it may read (``["*"]``: all), any case.'
    )
    inspect: bool = Field(
        False, description="Whether it may inspect timelines, watermarks, locks and queries."
    )
    max_concurrent: int | None = Field(
        None,
        gt=0,
        description="This identity's queries running at once (unset: only its fair share of "
        "``[limits] max_concurrent``).",
    )
    queries_per_second: float | None = Field(
        None, gt=0, description="This identity's admissions a second (unset: no rate limit)."
    )

    @model_validator(mode="after")
    def _proves_itself(self) -> TokenEntry:
        if not (self.token or self.client_cn):
            raise Rule("token", "give a token or a client_cn (a client certificate's common name)")
        return self

    def grant(self, index: int) -> TokenGrant:
        return TokenGrant(
            name=self.name if self.name is not None else f"token{index}",
            token=self.token,
            tables=frozenset(table.lower() for table in self.tables),
            inspect=self.inspect,
            client_cn=self.client_cn,
            max_concurrent=self.max_concurrent,
            queries_per_second=self.queries_per_second,
        )


_ENTRIES = TypeAdapter(list[TokenEntry])


def _grants(raw: Any) -> tuple[TokenGrant, ...]:
    if isinstance(raw, tuple) and all(isinstance(grant, TokenGrant) for grant in raw):
        return raw  # already grants (a configuration copied with dataclasses.replace)
    entries = _ENTRIES.validate_python(raw)
    return tuple(entry.grant(index) for index, entry in enumerate(entries))


Grants = Annotated[
    tuple[TokenGrant, ...], PlainValidator(_grants, json_schema_input_type=list[TokenEntry])
]
"""``[[tokens]]`` in the file, the grants in the configuration object."""
