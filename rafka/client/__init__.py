"""What every client (producer, consumer, admin) shares: the network client to the replica
hosts' listeners, the cluster metadata, the group coordinator lookup, ListOffsets, the retry
rule, serializers, and getting onto Ray."""
