"""Datasets (CDAP's partitioned file sets): named collections of partitions, each a
typed key, a location and metadata, added in a commit order that consumers read.

A dataset declares its partition key (ordered typed fields). Partitions are added by
the API (one or a batch), the command line and job steps, removed by key, and queried
by key ranges and metadata. Every partition has a position in its dataset's commit
order (``txid``, ``id``; :mod:`jobserver.store.feed`): a reader that has read up to a
position never later finds a partition before it that it did not see.

The package: ``keys`` (field types, how values are checked and stored), ``spec``
(what a user writes, validated), ``filters`` (the condition grammar, as SQL and in
Python), ``tables`` (the schema), ``records``, ``catalog`` (datasets: ``store.datasets``),
``partitions`` (adding, removing, querying and the ordered read:
``store.partitions``), ``feed`` (new partitions per dataset since a saved cursor:
the seam for partition triggers and consumers), ``outputs`` (partitions that job
steps write), ``api`` with
``serialize`` and ``openapi`` (the HTTP routes); the command line is
``jobserver.datasets.cli`` and ``jobserver.apply``.
"""
