"""Verified rewrites of Glue partitions, and the compactor job built on them.

A plain Glue table has no atomic commit, so each partition rewrite gets one, recorded step by step in a manifest
(``manifest``): planned → written → verified → swapped → cleaned. A run that finds a manifest carries it forward
from its state; a crash before ``written`` rewrites the run directory from scratch. One file per step, each over
the same unit of work (``work.Work``: the table, its Glue partition, its manifest with the input files):

- ``selection``: which partitions the compactor takes, each with a new or carried-forward manifest;
- ``write``: every output file in one Spark job (``binning`` cuts the inputs into bins, ``inputs`` and ``sizing``
  size them, ``merging`` holds the executor tasks), with the digest (``digest``) of the keys written;
- ``verify``: the run directory from footers and key columns, against that digest;
- ``swap``: one ``UpdatePartition`` points readers at the output;
- ``clean``: the inputs deleted after the grace period;
- ``protocol`` runs write → verify → swap over a run's work; ``job`` is the compactor (``Compactor``, ``main``).

The erasure job (``spark_jobs.erasure``) rewrites partitions the same way: it is a ``work.Rewriter`` whose selection
plans each partition with ``selection.plan_partition(..., erase=keys)``, so the manifest's ``erase`` names the
(Kafka partition, offset) rows to leave out; the executor task (``merging.MergeTask``) leaves them out and reports
them as dropped keys, as it does repeats: the write records expected = input keys - dropped, so verification, swap
and clean-up are the same code for it. The steps take the run directory and the inputs from the manifest and
assume nothing else of the compactor.
"""
