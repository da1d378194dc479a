"""Upsert ingestion on PySpark: changelog in, versioned segments and watermarks out.

Modules (one idea each): ``table`` (TOML definition -> TableDefinition -> TableDescriptor),
``granularity`` (time chunks), ``partitioning`` (key partition = pmod(xxhash64(pk), n)),
``resolve`` (key resolution as Spark transformations), ``segments`` (segment files), ``updater``
(validUntil rewrites as overwrite segments), ``manifest`` (exactly-once commit log), ``storage``
(Hadoop FileSystem), ``local_frames`` (small driver tables), ``job`` (IngestJob), ``cli``
(``main_ingest``).

Storage layout under ``<storage_root>/<table>/``::

    segments/<server>/b<seq>/_chunk=<chunk start>/_seg=<partition>/_rows=<open|closed>/*.parquet
                                                                              first generation
    segments/<server>/u<seq>/_chunk=<chunk start>/_seg=<partition>/_rows=<open|closed>/*.parquet
                                                                              overwrites
    _keyindex/<server>/r<seq>/_kpDir=<key partition>/part-*.parquet            a batch's resolution:
                                                                              key index level and
                                                                              pending validUntil
    _manifest/<server>/<seq>-{prepare,commit,done}.json                       commit log
"""
