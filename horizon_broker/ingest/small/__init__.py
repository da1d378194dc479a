"""Small batches on the driver: a micro-batch of a few events resolved and written without
Spark jobs.

A batch of one event cost about 1.5 s through Spark (four jobs: count, resolve, summarize, write),
most of it the jobs' fixed cost, which put event-to-visible latency at 3 to 5 s. A batch of at most
the table's ``driver_batch_rows`` rows (10,000 by default) is collected to the driver in one job
and everything after it runs in Python: the commit timestamps, the key index lookup (pyarrow reads
of the index levels, only the batch's keys), the resolution, and the files (pyarrow writes, in the
same layout, schema and encoding of timestamps Spark writes). The rules are the Spark path's,
restated for rows: :mod:`horizon_broker.ingest.small.resolution` (pure, checked against
:func:`horizon_broker.ingest.resolve.resolve` by a property test); :mod:`horizon_broker.ingest.small.files` reads and writes;
:mod:`horizon_broker.ingest.small.batch` decides when it applies and runs it; :mod:`horizon_broker.ingest.small.rewrite` applies
the updater's pending updates to segments with pyarrow, for batches of any size.
"""
