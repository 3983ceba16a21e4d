"""rafka: a Kafka-style replicated commit log on Ray actors.

    import rafka
    cluster = rafka.Cluster.start(num_brokers=3, data_dir="rafka-data")
    cluster.admin().create_topics([rafka.NewTopic("events", 6, 3)])
"""
from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING

# pyarrow's allocator (mimalloc) commits its arenas eagerly and asks for transparent huge
# pages on them; where THP is on for madvise (Linux's default), the first touch of every
# fresh 2 MiB page is a huge-page fault, and a process's first large Arrow buffers cost
# 2-4x the memory copy itself (a take of 125 MB: 230-360 ms against 90 ms, on this
# project's 2-core VM; send_batch's first call in a process 270k -> 420k records/s).
# Committing on demand keeps the same allocator on 4 KiB pages. mimalloc reads this when
# pyarrow is loaded, so it holds for this process when rafka is imported first, and for
# every process started after (Ray's workers, Spark's JVM and its Python workers);
# a value the user set is kept.
os.environ.setdefault("MIMALLOC_ARENA_EAGER_COMMIT", "0")

# Each name's module, imported on first use: a process that needs one part (a Spark worker
# planning a read, the CLI) does not pay for pyarrow, numpy and every client at start-up.
_EXPORTS = {
    "OffsetAndMetadata": "protocols.messages",
    **dict.fromkeys(["Admin", "ClusterDescription", "ConsumerGroupDescription",
                     "ConsumerGroupListing", "ListOffsetsResult", "MemberDescription",
                     "NewTopic", "PartitionInfo", "TopicDescription"], "rafka.admin"),
    "Cluster": "rafka.cluster",
    "Consumer": "rafka.consumer.consumer", "OffsetAndTimestamp": "rafka.consumer.consumer",
    "ConsumerRecord": "rafka.consumer.consumer_record",
    "CommitFailedError": "rafka.consumer.coordinator",
    "ConsumerGroupMetadata": "rafka.consumer.coordinator",
    "ConsumerRebalanceListener": "rafka.consumer.coordinator",
    "RecordMetadata": "rafka.producer.futures",
    "Producer": "rafka.producer.producer",
}

if TYPE_CHECKING:
    from protocols.messages import OffsetAndMetadata
    from rafka.admin import (Admin, ClusterDescription, ConsumerGroupDescription,
                             ConsumerGroupListing, ListOffsetsResult, MemberDescription,
                             NewTopic, PartitionInfo, TopicDescription)
    from rafka.cluster import Cluster
    from rafka.consumer.consumer import Consumer, OffsetAndTimestamp
    from rafka.consumer.consumer_record import ConsumerRecord
    from rafka.consumer.coordinator import (CommitFailedError, ConsumerGroupMetadata,
                                            ConsumerRebalanceListener)
    from rafka.producer.futures import RecordMetadata
    from rafka.producer.producer import Producer


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'rafka' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


__all__ = ["Admin", "Cluster", "ClusterDescription", "CommitFailedError", "Consumer",
           "ConsumerGroupDescription", "ConsumerGroupListing", "ConsumerGroupMetadata",
           "ConsumerRebalanceListener",
           "ConsumerRecord", "ListOffsetsResult", "MemberDescription", "NewTopic",
           "OffsetAndMetadata", "OffsetAndTimestamp", "PartitionInfo", "Producer",
           "RecordMetadata", "TopicDescription"]
