"""Partition replicas: the pure replication logic (``partition.py``, ``fetcher.py``, ...) and the
replica hosts that hold them (``hosted.py``, ``host.py``)."""
