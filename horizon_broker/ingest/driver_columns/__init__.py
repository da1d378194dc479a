"""Batches on the driver as Arrow columns: a batch of up to the table's ``driver_columnar_rows`` rows
resolved and written as Arrow columns, without Spark jobs after its collect.

A 500,000-row batch spent about 3.9 s in four Spark jobs (read and count, resolve against the key
index, summarize, write segments) on 2 cores; as Arrow columns the same work takes about 1.5 s:
the rows are collected in one Spark job, the key index is looked up by pyarrow for the batch's
keys only, and the window logic of :func:`horizon_broker.ingest.resolve.resolve` becomes a few vectorized passes
over the batch sorted by key. The rules are the row-wise ones of :mod:`horizon_broker.ingest.driver_rows.resolution`
(themselves checked against Spark's), restated for columns: :mod:`horizon_broker.ingest.driver_columns.stamps` (the
count and commit timestamps) and :mod:`horizon_broker.ingest.driver_columns.resolution` (pure, both checked against
the row-wise functions by a property test). :mod:`horizon_broker.ingest.driver_columns.index_lookup` finds the batch's
keys in the index levels, kept decoded between batches (:mod:`horizon_broker.ingest.driver_columns.level_cache`) and
searched by sorted key codes (:mod:`horizon_broker.ingest.driver_columns.key_lookup`); :mod:`horizon_broker.ingest.driver_columns.batch`
decides when the path applies and writes the files with :mod:`horizon_broker.ingest.segment_files`' writer, so
readers cannot tell the three paths apart.
"""
