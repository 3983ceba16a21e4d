"""The APIs this broker's listener serves, and at which versions: the one table the socket
server parses requests by and ``ApiVersions`` answers from.

Only the APIs built here are in it, each at the versions of Kafka's schemas whose fields are
all honoured. An API not in it (not built yet: quotas among others) is answered as Kafka answers an unsupported request: the connection is closed
(``protocols.kafka.codec``). Every key here has its handler in ``KafkaApis``' dispatch.
"""
from __future__ import annotations

from protocols.kafka.api_keys import ApiKey

# {api key: (min version, max version)} served. Grows as APIs are built.
SUPPORTED: dict[ApiKey, tuple[int, int]] = {
    ApiKey.API_VERSIONS: (0, 4),
    ApiKey.METADATA: (0, 13),
    # v3 is the oldest Kafka 4 serves; v13 names topics by id.
    ApiKey.PRODUCE: (3, 13),
    # v4 is the oldest Kafka 4 serves; v7 brings fetch sessions (KIP-227); v13 names topics
    # by id.
    ApiKey.FETCH: (4, 17),
    # v7 adds MAX_TIMESTAMP (-3) and v8 EARLIEST_LOCAL (-4), not built yet.
    ApiKey.LIST_OFFSETS: (1, 6),
    # A consumer's check after a leader change (KIP-320): where its epoch ends on the leader.
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (2, 4),
    ApiKey.DELETE_RECORDS: (0, 2),
    # The idempotent producers each partition's leader keeps state for (KIP-664).
    ApiKey.DESCRIBE_PRODUCERS: (0, 0),
    # ---- groups (group_apis) ----
    # v1 adds key type 1 (a transactional id's coordinator); v4+ asks for many keys at once.
    ApiKey.FIND_COORDINATOR: (0, 6),
    ApiKey.JOIN_GROUP: (0, 9),
    ApiKey.SYNC_GROUP: (0, 5),
    ApiKey.HEARTBEAT: (0, 4),
    ApiKey.LEAVE_GROUP: (0, 5),
    ApiKey.OFFSET_COMMIT: (2, 9),
    # v8+ asks for many groups at once.
    ApiKey.OFFSET_FETCH: (1, 9),
    # KIP-496: an admin removes a group's offsets of topics it no longer reads.
    ApiKey.OFFSET_DELETE: (0, 0),
    # v3+ names the member and generation (KIP-447: fencing by the group's metadata).
    ApiKey.TXN_OFFSET_COMMIT: (0, 5),
    # ---- transactions (txn_apis) ----
    ApiKey.INIT_PRODUCER_ID: (0, 5),
    # v4+ are the brokers' own (verifyOnly, many transactions): clients send v0-v3.
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 3),
    ApiKey.ADD_OFFSETS_TO_TXN: (0, 4),
    # v5 answers a new producer id and epoch (transaction version 2, not offered).
    ApiKey.END_TXN: (0, 4),
    # Kafka 4 serves v1+; kafka-transactions.sh abort sends it to a partition's leader.
    ApiKey.WRITE_TXN_MARKERS: (1, 1),
    ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
    # v1 filters by how long a transaction has been open (KIP-994).
    ApiKey.LIST_TRANSACTIONS: (0, 1),
    # ---- administration (admin_apis) ----
    ApiKey.CREATE_TOPICS: (2, 7),
    # ---- ACLs (acl_apis) ----
    # v0 (LITERAL patterns only) is not in Kafka 4's schemas as kio carries them.
    ApiKey.DESCRIBE_ACLS: (1, 3),
    ApiKey.CREATE_ACLS: (1, 3),
    ApiKey.DELETE_ACLS: (1, 3),
    # No quota can be set yet: every filter selects nothing (kafka-configs.sh asks).
    ApiKey.DESCRIBE_CLIENT_QUOTAS: (0, 1),
    ApiKey.ALTER_CLIENT_QUOTAS: (0, 1),
    ApiKey.DELETE_TOPICS: (1, 6),
    ApiKey.CREATE_PARTITIONS: (0, 3),
    ApiKey.DESCRIBE_CLUSTER: (0, 1),
    ApiKey.LIST_GROUPS: (0, 5),
    ApiKey.DESCRIBE_GROUPS: (0, 5),
    ApiKey.DELETE_GROUPS: (0, 2),
    ApiKey.DESCRIBE_CONFIGS: (1, 4),
    ApiKey.ALTER_CONFIGS: (0, 2),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
    ApiKey.ELECT_LEADERS: (0, 2),
    ApiKey.DESCRIBE_LOG_DIRS: (1, 4),
    # ---- reassignments (reassignment_apis) ----
    # v1 (KIP-860) lets the client refuse a change of replication factor.
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 1),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: (0, 0),
    # ---- SCRAM credentials (admin_apis; KIP-554) ----
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
    # ---- SASL (sasl_authenticator, before a SASL connection is authenticated) ----
    # v0: the mechanism's tokens follow as bare frames; v1: in SaslAuthenticate requests.
    ApiKey.SASL_HANDSHAKE: (0, 1),
    ApiKey.SASL_AUTHENTICATE: (0, 2),
}

# What ApiVersions tells: SUPPORTED, but Produce from v0, as Kafka 4 does (KAFKA-18659,
# ApiKeys.PRODUCE_API_VERSIONS_RESPONSE_MIN_VERSION): librdkafka before 2.10 compresses with
# gzip, snappy or lz4 only where the broker claims Produce v0-v2, and sends uncompressed
# batches otherwise. A v0-v2 request itself is still refused (connection closed).
ADVERTISED: dict[ApiKey, tuple[int, int]] = {
    **SUPPORTED, ApiKey.PRODUCE: (0, SUPPORTED[ApiKey.PRODUCE][1])}
