"""PySpark jobs, one package each: ``archiver`` (Kafka → Parquet, exactly once), ``compaction`` (verified rewrites
of closed partitions) and ``erasure`` (erasure requests carried out through the compactor's rewrite), over
``common`` (the session factory, the run's identity and the executors' S3 client) and ``keyed_hash``. The archiver
and the compactor never import each other; the erasure job builds on both (the compactor's rewrite, the archiver's
field types); ``entrypoint`` starts any of the three (pyproject.toml's import contracts hold these directions)."""
