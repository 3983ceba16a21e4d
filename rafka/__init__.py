"""rafka: a Kafka-style replicated commit log on Ray actors.

    import rafka
    cluster = rafka.Cluster.start(num_brokers=3, data_dir="rafka-data")
    cluster.admin().create_topics([rafka.NewTopic("events", 6, 3)])
"""
from rafka.admin import (Admin, ClusterDescription, ListOffsetsResult, NewTopic, PartitionInfo,
                         TopicDescription)
from rafka.cluster import Cluster
from rafka.consumer import ConsumerRecord, Consumer, OffsetAndTimestamp
from rafka.producer import Producer, RecordMetadata

__all__ = ["Admin", "Cluster", "ClusterDescription", "Consumer", "ConsumerRecord",
           "ListOffsetsResult", "NewTopic", "OffsetAndTimestamp", "PartitionInfo", "Producer",
           "RecordMetadata", "TopicDescription"]
