"""Batches on the driver, row by row: a micro-batch of a few events resolved and written without
Spark jobs.

A batch of one event cost about 1.5 s through Spark (four jobs: count, resolve, summarize, write),
most of it the jobs' fixed cost, which put event-to-visible latency at 3 to 5 s. A batch of at most
the table's ``driver_batch_rows`` rows (10,000 by default) is collected to the driver in one job
and everything after it runs in Python: the commit timestamps, the key index lookup (pyarrow reads
of the index levels, only the batch's keys), the resolution, and the files (pyarrow writes, in the
same layout, schema and encoding of timestamps Spark writes). The rules are the Spark path's,
restated for rows: :mod:`horizon_broker.ingest.driver_rows.resolution` (pure, checked against
:func:`horizon_broker.ingest.resolve.resolve` by a property test); :mod:`horizon_broker.ingest.driver_rows.batch` decides when it
applies and runs it. Beside it, shared with the other paths: :mod:`horizon_broker.ingest.segment_files`
reads and writes the files, and :mod:`horizon_broker.ingest.update_rewrite` applies the updater's
pending updates to segments with pyarrow, for batches of any size.
"""
