"""What a call asks of the snapshot it reads: the read controls of one request."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from horizon_broker._core.errors import InvalidArgument
from horizon_broker.pins.store import check_pin_id
from horizon_broker.watermark import tokens

MAX_STALENESS_S = 365 * 86400.0


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """The read controls of one query (every field optional).

    ``min_snapshot``: per table, the lowest snapshot a default read may use (from a commit token
    for read-your-writes, or from the client's highest seen snapshot for monotonic reads).
    ``max_staleness_s``: refuse a default read whose LWM is older than this on the commit clock.
    ``pin_id``: read at that snapshot pin's snapshot. ``use_cache``: False skips the result cache.
    """

    min_snapshot: Mapping[str, int] = field(default_factory=dict)
    max_staleness_s: float | None = None
    pin_id: str = ""
    use_cache: bool = True

    @classmethod
    def parse(
        cls,
        *,
        min_snapshot: str = "",
        max_staleness_s: float = 0.0,
        pin_id: str = "",
        bypass_cache: bool = False,
    ) -> ReadOptions:
        """Check and convert the request's fields (0 staleness: no bound)."""
        if not math.isfinite(max_staleness_s) or not 0 <= max_staleness_s <= MAX_STALENESS_S:
            raise InvalidArgument(
                f"max_staleness must be between 0 (no bound) and {MAX_STALENESS_S:.0f} seconds, "
                f"got {max_staleness_s!r}"
            )
        if pin_id:
            check_pin_id(pin_id)
        return cls(
            min_snapshot=tokens.decode(min_snapshot),
            max_staleness_s=max_staleness_s or None,
            pin_id=pin_id,
            use_cache=not bypass_cache,
        )


DEFAULT = ReadOptions()
