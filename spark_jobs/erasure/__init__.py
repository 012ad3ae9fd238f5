"""The erasure job: every pending erasure request (``kafkalake.erasure``) carried out over the whole lake, in one
batch per run, through the compactor's verified rewrite (``spark_jobs.compaction.protocol``), never a second one.

- ``matching``: one Spark scan per table of only the columns that identify a subject (subject fields, the key's
  hash, the offsets), every request of the batch at once; which (Kafka partition, offset) rows of which partition
  and quarantine object belong to which request;
- ``batch``: the batch, stored in the job's lease (``kafkalake.lease``) before any rewrite: per table, the rows to
  leave out of each partition and quarantine object, and how far each got;
- ``purge``: after the grace period, every version of the replaced objects and every noncurrent version under the
  rewritten partitions, by version id; quarantine objects rewritten in place, their other versions deleted;
- ``job``: the run (``Eraser``, ``main``): batch → per table, under its compaction lease: rewrite → purge →
  receipts.
"""
