"""rafka: a Kafka-style replicated commit log on Ray actors.

    import rafka
    cluster = rafka.Cluster.start(num_brokers=3, data_dir="rafka-data")
    cluster.admin().create_topics([rafka.NewTopic("events", 6, 3)])
"""
from protocols.messages import OffsetAndMetadata
from rafka.admin import (Admin, ClusterDescription, ConsumerGroupDescription,
                         ConsumerGroupListing, ListOffsetsResult, MemberDescription, NewTopic,
                         PartitionInfo, TopicDescription)
from rafka.cluster import Cluster
from rafka.consumer.consumer import Consumer, OffsetAndTimestamp
from rafka.consumer.consumer_record import ConsumerRecord
from rafka.consumer.coordinator import CommitFailedError, ConsumerRebalanceListener
from rafka.producer.futures import RecordMetadata
from rafka.producer.producer import Producer

__all__ = ["Admin", "Cluster", "ClusterDescription", "CommitFailedError", "Consumer",
           "ConsumerGroupDescription", "ConsumerGroupListing", "ConsumerRebalanceListener",
           "ConsumerRecord", "ListOffsetsResult", "MemberDescription", "NewTopic",
           "OffsetAndMetadata", "OffsetAndTimestamp", "PartitionInfo", "Producer",
           "RecordMetadata", "TopicDescription"]
