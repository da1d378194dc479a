"""Upsert ingestion on PySpark: changelog in, versioned segments and watermarks out.

Modules, one idea each, in the order a batch meets them (``job`` ties them together):

- the server: ``server`` (IngestServer: many tables in one process and one Spark application, one
  clock, heartbeat and lock renewer; parking on leaving), ``server_config`` (what a server serves,
  from TOML or ``--table``), ``preflight`` (what is refused before anything is written), ``cli``
  (``main_ingest``);
- the job: ``job`` (IngestJob, one table: start, batches, streams, handovers, idle and parked
  partitions; BatchResult), ``steps`` (kill points and timings), ``server_table`` (what every
  stage shares);
- reading: ``changelog`` (reading the source, naming what a batch consumed), ``commit_times``
  (each change's commit timestamp and time chunk); Redis stream tables: ``redis_stream_source``
  (the stream entry and its events), ``redis_stream_read`` (entries by id, rows, lag),
  ``redis_stream_batches`` (a server pass), ``redis_stream_spark`` (the Python data source of
  ``--stream``), ``stream_offsets`` (entry ids and the offsets the commit log keeps);
- the Spark batch: ``batch`` (the stages up to the commit), ``resolve`` (key resolution as Spark
  transformations), ``key_index`` (key index levels: batches' resolutions), ``segments`` (writing
  and describing segment files), ``bucketing`` (one key partition per Spark task);
- allocation and locks: ``allocation`` (a batch's partition numbers), ``locking`` (its locks and the
  updater's);
- the commit protocol: ``manifest`` (the commit log and its state), ``commit`` (prepare, commit,
  publish, report, done), ``recovery`` (a restart), ``update_run`` and ``updater`` (validUntil
  rewrites as overwrite segments, a transaction like a batch);
- upkeep: ``upkeep`` (between transactions), ``garbage`` (what may be deleted), ``retention``
  (the history horizon), ``compaction_records`` (what compactions replaced, read by both ingest and compaction);
- foundations: ``table`` (TOML definition -> TableDefinition -> TableDescriptor), ``granularity``
  (time chunks), ``partitioning`` (key partition = pmod(xxhash64(pk), n)), ``storage`` (Hadoop
  FileSystem), ``local_frames`` (small driver tables).

Storage layout under ``<storage_root>/<table>/``::

    segments/<server>/b<seq>/_chunk=<chunk start>/_seg=<partition>/_rows=<open|closed>/*.parquet
                                                                              first generation
    segments/<server>/u<seq>/_chunk=<chunk start>/_seg=<partition>/_rows=<open|closed>/*.parquet
                                                                              overwrites
    _keyindex/<server>/r<seq>/_kpDir=<key partition>/part-*.parquet            a batch's resolution:
                                                                              key index level and
                                                                              pending validUntil
    _manifest/<server>/<seq>-{prepare,commit,done}.json                       commit log
    _compaction/<run>.json                                                    compaction records
"""
