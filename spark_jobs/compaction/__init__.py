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

A second job that rewrites partitions (erasure of rows) plugs in beside ``selection``: it is a ``work.Rewriter`` with
its own selection that stores, per partition, a manifest whose inputs are the files to rewrite (its key from
``kafkalake.layout``), and hands its ``Work`` to ``protocol.carry_forward``, then to ``clean``. It gives the
executor task (``merging.MergeTask``) the rows to leave out, which the task reports as dropped keys, as it does
repeats today: the write records expected = input keys - dropped, so verification, swap and clean-up are the same
code for it. The steps take the run directory and the inputs from the manifest and assume nothing else of the
compactor.
"""
