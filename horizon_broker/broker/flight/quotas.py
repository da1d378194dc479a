"""Per-identity quotas of what Flight SQL keeps between calls: prepared statements, sessions and
results waiting for their DoGet.

Each store bounds its entries on the broker and per identity (token name), so one caller that
never closes what it opens runs out of its own quota and leaves the broker's to the others.
A refusal is RESOURCE_EXHAUSTED naming the setting and the caller's count.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from horizon_broker._core.errors import ResourceExhausted
from horizon_broker.broker.config import FlightConfig


@dataclass(frozen=True, slots=True)
class Quota:
    """At most ``total`` entries on the broker and ``per_identity`` of one identity; ``setting``
    is the ``[flight]`` key (``max_<setting>`` and ``max_<setting>_per_identity``)."""

    what: str
    setting: str
    total: int
    per_identity: int
    advice: str


@dataclass(slots=True)
class OwnerCounts:
    """How many entries each owner holds (kept by the store under its own lock)."""

    quota: Quota
    counts: Counter[str] = field(default_factory=Counter)

    def check(self, owner: str) -> None:
        """Refuse one more entry of ``owner`` past either bound."""
        quota = self.quota
        owned = self.counts[owner]
        if owned >= quota.per_identity:
            raise ResourceExhausted(
                f"token {owner!r} has {owned} {quota.what}, its quota "
                f"([flight].max_{quota.setting}_per_identity = {quota.per_identity}): "
                f"{quota.advice}"
            )
        total = self.counts.total()
        if total >= quota.total:
            raise ResourceExhausted(
                f"{total} {quota.what} on this broker ([flight].max_{quota.setting} = "
                f"{quota.total}; token {owner!r} has {owned}): {quota.advice}"
            )

    def add(self, owner: str) -> None:
        self.check(owner)
        self.counts[owner] += 1

    def remove(self, owner: str) -> None:
        self.counts[owner] -= 1
        if self.counts[owner] <= 0:
            del self.counts[owner]

    def of(self, owner: str) -> int:
        return self.counts[owner]


STATEMENT_ADVICE = "close some (ClosePreparedStatement) or wait for idle ones to expire"
SESSION_ADVICE = (
    "send the arrow_flight_session_id cookie back (ADBC: adbc.flight.sql.rpc."
    "with_cookie_middleware) or close sessions (CloseSession)"
)
RESULT_ADVICE = "read (DoGet) or cancel (CancelFlightInfo) the results started before"


def statement_quota(total: int = 10_000, per_identity: int = 1_000) -> Quota:
    return Quota("open prepared statements", "statements", total, per_identity, STATEMENT_ADVICE)


def session_quota(total: int = 10_000, per_identity: int = 1_000) -> Quota:
    return Quota("open Flight SQL sessions", "sessions", total, per_identity, SESSION_ADVICE)


def result_quota(total: int = 64, per_identity: int = 16) -> Quota:
    return Quota(
        "results waiting for DoGet or being read",
        "waiting_results",
        total,
        per_identity,
        RESULT_ADVICE,
    )


def configured(flight: FlightConfig) -> tuple[Quota, Quota, Quota]:
    """The statement, session and waiting-result quotas ``[flight]`` sets."""
    return (
        statement_quota(flight.max_statements, flight.max_statements_per_identity),
        session_quota(flight.max_sessions, flight.max_sessions_per_identity),
        result_quota(flight.max_waiting_results, flight.max_waiting_results_per_identity),
    )
