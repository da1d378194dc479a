"""Python client of the Horizon broker.

    from horizon_broker.client import connect
    with connect("127.0.0.1:50051", token="s3cret") as horizon:
        table = horizon.query("SELECT * FROM accounts WHERE id = 7")   # pyarrow.Table
        horizon.explain("SELECT ...").rewritten_sql
        frame = horizon.passthrough(my_spark, "SELECT ...")            # runs on *your* Spark

Read controls (each optional, on ``execute``/``query``/``explain``/``rewrite``)::

    batch = server.run_batch("orders", frame)                         # ingestion
    horizon.query("SELECT ...", min_snapshot=batch.token)             # read-your-writes
    horizon.query("SELECT ...", min_snapshot=[a.token, b.token])      # several (or server.token())
    horizon.query("SELECT ...", max_staleness=5.0)                    # refuse older than 5 s
    with horizon.pin(["accounts", "orders"], lease=600) as cut:       # one cut for a report
        cut.query("SELECT ..."); cut.query("SELECT ...")
    horizon.query("SELECT ...", cache=False)                          # skip the result cache

Monotonic reads are automatic: the client remembers the highest snapshot of each table it has
been served (:attr:`HorizonClient.session_token`) and sends it with every query, so no broker,
restarted or another one behind a load balancer, serves it an older default snapshot.

Several brokers::

    horizon = connect(["10.0.0.1:50051", "10.0.0.2:50051"], token="s3cret")
    horizon = connect("10.0.0.1:50051,10.0.0.2:50051")    # the same (HORIZON_TARGET, --target)
    horizon.current                                         # the broker calls go to now

Calls go to one broker (the first) until it goes away, then to the next, and so on round the
list; the session token goes with every call, so a read on the next broker never sees an older
snapshot of a table than one the client was already served (that broker waits for its state to
reach it). A call moves on when it fails with UNAVAILABLE (refused, reset, the broker stopping
or cut off from its state store) or with DEADLINE_EXCEEDED before any connection to that broker
was up; any other error is the answer and is raised (INVALID_ARGUMENT, NOT_FOUND,
PERMISSION_DENIED, a deadline on a connected broker, ...). When every broker fails, the last
failure is raised. What is retried on the next broker:

- reads (``query``/``execute``/``start_query``, ``explain``, ``rewrite`` without a pin,
  inspection, ``health``): run again, whole; a query cut off mid-stream drops its partial rows;
- ``subscribe``: again on the next broker when the first went away before its first message;
  ``follow(reconnects=N)`` resumes from its last token (on the next broker) after that;
- ``renew_pin`` and ``release_pin``: same effect when repeated (a pin lives in the state
  store, so any broker renews or releases it).

Never sent twice: ``pin`` and ``rewrite(pin_lease=...)``, each of which creates a pin. They go
to the first broker a connection is made to (``connect_timeout`` each) and are not repeated
once sent; if that broker goes away mid-call the error is raised (a pin it may have made runs
out with its lease).

Failed calls raise the Horizon error type matching the status code (``NotFound``,
``PermissionDenied``, ...), all subclasses of :class:`horizon_broker._core.errors.HorizonError`.
"""

from __future__ import annotations

from .connecting import connect, parse_targets
from .pinned import PinnedSnapshot, register_passthrough_views
from .results import QueryCall, QueryResult
from .session import RECONNECT_PAUSE_S, HorizonClient

__all__ = [
    "RECONNECT_PAUSE_S",
    "HorizonClient",
    "PinnedSnapshot",
    "QueryCall",
    "QueryResult",
    "connect",
    "parse_targets",
    "register_passthrough_views",
]
