"""Why one key's row is (or is not) in a table at a snapshot: every stored version of the key,
where it is stored, and the one reason each is or is not what a query at that snapshot reads.

:mod:`~horizon_broker.broker.explain_key.verdicts` is the pure rule (stored versions, segment
places and the read point in, one verdict per version out);
:mod:`~horizon_broker.broker.explain_key.places` says, from the timeline's picture, where each
segment stands for a query (read, overshadowed, standby, unreadable, compacted into which);
:mod:`~horizon_broker.broker.explain_key.key_values` reads a key written by a person against the
table's primary key; :mod:`~horizon_broker.broker.explain_key.gather` reads the key's versions
from the segment files (pyarrow) and the compaction records. The doors (the gRPC
InspectionService, the console) reach it through :mod:`horizon_broker.broker.api.inspection`.

Sits beside :mod:`horizon_broker.broker.engine` (neither imports the other): may import
:mod:`horizon_broker.broker.direct_lookup` and the layers below the broker.
"""
