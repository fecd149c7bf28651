"""The corpus job, ``neardup dedup``: every near-duplicate pair of a whole corpus at once.

The same fingerprints (app.core.fingerprint) and the same match rule as the service
(app.batch.rules), computed in batch mode instead of one query per document: one sort of
each SimHash permutation table and of each MinHash band table, pairs from the runs of
equal prefixes or band keys, every candidate verified; clusters are the connected
components of the pairs. Two engines give the same files (docs/dedup.md):

- ``app.batch.local``: one machine, every core;
- ``app.batch.spark``: PySpark, fingerprints in ``mapPartitions``, pairs by a shuffle on
  the table and band keys, clusters by large-star / small-star connected components.

Readers (JSON lines, CSV, Parquet) are in ``app.batch.readers``; the command line in
``app.batch.command``.
"""
