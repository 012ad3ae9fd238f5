"""PySpark jobs, one package each: ``archiver`` (Kafka → Parquet, exactly once) and ``compaction`` (verified rewrites
of closed partitions), over ``common`` (the session factory and the executors' S3 client). The two jobs never
import each other; ``entrypoint`` starts either."""
