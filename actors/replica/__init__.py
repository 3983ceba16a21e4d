"""Partition replicas: the pure replication logic (``partition.py``, ``fetcher.py``, ...) and the
replica hosts that hold them (``hosted_replica.py``, ``replica_host.py``)."""
