"""Partition replicas: the pure replication logic and (later) its Ray actor shell."""
