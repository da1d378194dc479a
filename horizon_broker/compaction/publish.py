"""A compaction's publish whose outcome is read back when its call fails.

Redis may run the publishing script and the reply be lost: the client retries, and the retry
either succeeds (the script is idempotent), runs out of time (UNAVAILABLE) or is refused because a
lock was lost in between (LockLost), although the first try took effect. The error alone does not
say whether the outputs are announced, so the state store is asked.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from horizon_broker._core.errors import HorizonError, Unavailable
from horizon_broker.timeline.segment import Segment
from horizon_broker.watermark.server import ServerClient

log = logging.getLogger(__name__)


def took_effect(
    announced: Sequence[Segment], added: Sequence[Segment], removed: Sequence[Segment]
) -> bool:
    """Whether a publish of ``added`` and ``removed`` shows in ``announced`` (pure): every added
    segment announced and every removed one withdrawn. Added segments are the run's own (their
    partition numbers were allocated to it), so no other job can have announced them."""
    ids = {segment.id for segment in announced}
    return all(s.id in ids for s in added) and not any(s.id in ids for s in removed)


def publish_checked(
    client: ServerClient,
    publish: Callable[[], None],
    added: Sequence[Segment],
    removed: Sequence[Segment],
) -> None:
    """Run ``publish``; when it fails, return normally if the state store shows it took effect
    anyway, else raise its error (also when the store cannot be read)."""
    try:
        publish()
    except HorizonError as error:
        if not (added or removed):
            raise
        table = (added or removed)[0].table
        try:
            announced = client.announced_segments(table)
        except Unavailable:
            raise error from None
        if not took_effect(announced, added, removed):
            raise
        log.warning("the publish to table %s took effect despite: %s", table, error)
