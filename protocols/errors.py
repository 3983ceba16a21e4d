"""Kafka's errors as Python exceptions.

Every error carries Kafka's numeric code (the protocol's ``error_code``) so that it can cross
an actor boundary as ``(code, message)`` and be rebuilt on the other side as the same class:
``error_for_code(e.code, str(e))``.
"""
from __future__ import annotations

from typing import ClassVar


class KafkaError(Exception):
    """Base of every rafka error. ``code`` is Kafka's error code, ``name`` its protocol name."""

    code: ClassVar[int] = -1
    name: ClassVar[str] = "UNKNOWN_SERVER_ERROR"
    retriable: ClassVar[bool] = False

    def __init__(self, message: str = ""):
        super().__init__(message or self.name)

    @property
    def message(self) -> str:
        return str(self)

    def __reduce__(self):
        # Exceptions cross Ray and multiprocessing boundaries by pickling; keep the class.
        return (type(self), (str(self),))

    def to_wire(self) -> tuple[int, str]:
        return (self.code, str(self))


_BY_CODE: dict[int, type[KafkaError]] = {-1: KafkaError}


def _error(class_name: str, code: int, name: str, retriable: bool = False,
           base: type[KafkaError] = KafkaError) -> type[KafkaError]:
    cls = type(class_name, (base,), {"code": code, "name": name, "retriable": retriable,
                                      "__module__": __name__})
    _BY_CODE.setdefault(code, cls)
    return cls


UnknownServerError = KafkaError
OffsetOutOfRangeError = _error("OffsetOutOfRangeError", 1, "OFFSET_OUT_OF_RANGE")
CorruptRecordError = _error("CorruptRecordError", 2, "CORRUPT_MESSAGE", retriable=True)
UnknownTopicOrPartitionError = _error("UnknownTopicOrPartitionError", 3,
                                      "UNKNOWN_TOPIC_OR_PARTITION", retriable=True)
InvalidFetchSizeError = _error("InvalidFetchSizeError", 4, "INVALID_FETCH_SIZE")
LeaderNotAvailableError = _error("LeaderNotAvailableError", 5, "LEADER_NOT_AVAILABLE",
                                 retriable=True)
NotLeaderOrFollowerError = _error("NotLeaderOrFollowerError", 6, "NOT_LEADER_OR_FOLLOWER",
                                  retriable=True)
RequestTimedOutError = _error("RequestTimedOutError", 7, "REQUEST_TIMED_OUT", retriable=True)
BrokerNotAvailableError = _error("BrokerNotAvailableError", 8, "BROKER_NOT_AVAILABLE")
ReplicaNotAvailableError = _error("ReplicaNotAvailableError", 9, "REPLICA_NOT_AVAILABLE",
                                  retriable=True)
RecordTooLargeError = _error("RecordTooLargeError", 10, "MESSAGE_TOO_LARGE")
StaleControllerEpochError = _error("StaleControllerEpochError", 11, "STALE_CONTROLLER_EPOCH")
OffsetMetadataTooLargeError = _error("OffsetMetadataTooLargeError", 12,
                                     "OFFSET_METADATA_TOO_LARGE")
NetworkError = _error("NetworkError", 13, "NETWORK_EXCEPTION", retriable=True)
CoordinatorLoadInProgressError = _error("CoordinatorLoadInProgressError", 14,
                                        "COORDINATOR_LOAD_IN_PROGRESS", retriable=True)
CoordinatorNotAvailableError = _error("CoordinatorNotAvailableError", 15,
                                      "COORDINATOR_NOT_AVAILABLE", retriable=True)
NotCoordinatorError = _error("NotCoordinatorError", 16, "NOT_COORDINATOR", retriable=True)
InvalidTopicError = _error("InvalidTopicError", 17, "INVALID_TOPIC_EXCEPTION")
RecordListTooLargeError = _error("RecordListTooLargeError", 18, "RECORD_LIST_TOO_LARGE")
NotEnoughReplicasError = _error("NotEnoughReplicasError", 19, "NOT_ENOUGH_REPLICAS",
                                retriable=True)
NotEnoughReplicasAfterAppendError = _error("NotEnoughReplicasAfterAppendError", 20,
                                           "NOT_ENOUGH_REPLICAS_AFTER_APPEND", retriable=True)
InvalidRequiredAcksError = _error("InvalidRequiredAcksError", 21, "INVALID_REQUIRED_ACKS")
IllegalGenerationError = _error("IllegalGenerationError", 22, "ILLEGAL_GENERATION")
InconsistentGroupProtocolError = _error("InconsistentGroupProtocolError", 23,
                                        "INCONSISTENT_GROUP_PROTOCOL")
InvalidGroupIdError = _error("InvalidGroupIdError", 24, "INVALID_GROUP_ID")
UnknownMemberIdError = _error("UnknownMemberIdError", 25, "UNKNOWN_MEMBER_ID")
InvalidSessionTimeoutError = _error("InvalidSessionTimeoutError", 26, "INVALID_SESSION_TIMEOUT")
RebalanceInProgressError = _error("RebalanceInProgressError", 27, "REBALANCE_IN_PROGRESS")
InvalidCommitOffsetSizeError = _error("InvalidCommitOffsetSizeError", 28,
                                      "INVALID_COMMIT_OFFSET_SIZE")
TopicAuthorizationFailedError = _error("TopicAuthorizationFailedError", 29,
                                       "TOPIC_AUTHORIZATION_FAILED")
GroupAuthorizationFailedError = _error("GroupAuthorizationFailedError", 30,
                                       "GROUP_AUTHORIZATION_FAILED")
ClusterAuthorizationFailedError = _error("ClusterAuthorizationFailedError", 31,
                                         "CLUSTER_AUTHORIZATION_FAILED")
InvalidTimestampError = _error("InvalidTimestampError", 32, "INVALID_TIMESTAMP")
UnsupportedSaslMechanismError = _error("UnsupportedSaslMechanismError", 33,
                                       "UNSUPPORTED_SASL_MECHANISM")
IllegalSaslStateError = _error("IllegalSaslStateError", 34, "ILLEGAL_SASL_STATE")
UnsupportedVersionError = _error("UnsupportedVersionError", 35, "UNSUPPORTED_VERSION")
TopicAlreadyExistsError = _error("TopicAlreadyExistsError", 36, "TOPIC_ALREADY_EXISTS")
InvalidPartitionsError = _error("InvalidPartitionsError", 37, "INVALID_PARTITIONS")
InvalidReplicationFactorError = _error("InvalidReplicationFactorError", 38,
                                       "INVALID_REPLICATION_FACTOR")
InvalidReplicaAssignmentError = _error("InvalidReplicaAssignmentError", 39,
                                       "INVALID_REPLICA_ASSIGNMENT")
InvalidConfigError = _error("InvalidConfigError", 40, "INVALID_CONFIG")
NotControllerError = _error("NotControllerError", 41, "NOT_CONTROLLER", retriable=True)
InvalidRequestError = _error("InvalidRequestError", 42, "INVALID_REQUEST")
OutOfOrderSequenceNumberError = _error("OutOfOrderSequenceNumberError", 45,
                                       "OUT_OF_ORDER_SEQUENCE_NUMBER")
DuplicateSequenceNumberError = _error("DuplicateSequenceNumberError", 46,
                                      "DUPLICATE_SEQUENCE_NUMBER")
InvalidProducerEpochError = _error("InvalidProducerEpochError", 47, "INVALID_PRODUCER_EPOCH")
InvalidTxnStateError = _error("InvalidTxnStateError", 48, "INVALID_TXN_STATE")
InvalidProducerIdMappingError = _error("InvalidProducerIdMappingError", 49,
                                       "INVALID_PRODUCER_ID_MAPPING")
InvalidTransactionTimeoutError = _error("InvalidTransactionTimeoutError", 50,
                                        "INVALID_TRANSACTION_TIMEOUT")
ConcurrentTransactionsError = _error("ConcurrentTransactionsError", 51,
                                     "CONCURRENT_TRANSACTIONS", retriable=True)
TransactionCoordinatorFencedError = _error("TransactionCoordinatorFencedError", 52,
                                           "TRANSACTION_COORDINATOR_FENCED")
TransactionalIdAuthorizationFailedError = _error("TransactionalIdAuthorizationFailedError", 53,
                                                 "TRANSACTIONAL_ID_AUTHORIZATION_FAILED")
SecurityDisabledError = _error("SecurityDisabledError", 54, "SECURITY_DISABLED")
OperationNotAttemptedError = _error("OperationNotAttemptedError", 55, "OPERATION_NOT_ATTEMPTED")
KafkaStorageError = _error("KafkaStorageError", 56, "KAFKA_STORAGE_ERROR", retriable=True)
SaslAuthenticationError = _error("SaslAuthenticationError", 58, "SASL_AUTHENTICATION_FAILED")
UnknownProducerIdError = _error("UnknownProducerIdError", 59, "UNKNOWN_PRODUCER_ID")
ReassignmentInProgressError = _error("ReassignmentInProgressError", 60,
                                     "REASSIGNMENT_IN_PROGRESS")
NonEmptyGroupError = _error("NonEmptyGroupError", 68, "NON_EMPTY_GROUP")
GroupIdNotFoundError = _error("GroupIdNotFoundError", 69, "GROUP_ID_NOT_FOUND")
FetchSessionIdNotFoundError = _error("FetchSessionIdNotFoundError", 70,
                                     "FETCH_SESSION_ID_NOT_FOUND", retriable=True)
InvalidFetchSessionEpochError = _error("InvalidFetchSessionEpochError", 71,
                                       "INVALID_FETCH_SESSION_EPOCH", retriable=True)
TopicDeletionDisabledError = _error("TopicDeletionDisabledError", 73, "TOPIC_DELETION_DISABLED")
FencedLeaderEpochError = _error("FencedLeaderEpochError", 74, "FENCED_LEADER_EPOCH",
                                retriable=True)
UnknownLeaderEpochError = _error("UnknownLeaderEpochError", 75, "UNKNOWN_LEADER_EPOCH",
                                 retriable=True)
UnsupportedCompressionTypeError = _error("UnsupportedCompressionTypeError", 76,
                                         "UNSUPPORTED_COMPRESSION_TYPE")
StaleBrokerEpochError = _error("StaleBrokerEpochError", 77, "STALE_BROKER_EPOCH")
OffsetNotAvailableError = _error("OffsetNotAvailableError", 78, "OFFSET_NOT_AVAILABLE",
                                 retriable=True)
MemberIdRequiredError = _error("MemberIdRequiredError", 79, "MEMBER_ID_REQUIRED")
PreferredLeaderNotAvailableError = _error("PreferredLeaderNotAvailableError", 80,
                                          "PREFERRED_LEADER_NOT_AVAILABLE", retriable=True)
GroupMaxSizeReachedError = _error("GroupMaxSizeReachedError", 81, "GROUP_MAX_SIZE_REACHED")
FencedInstanceIdError = _error("FencedInstanceIdError", 82, "FENCED_INSTANCE_ID")
EligibleLeadersNotAvailableError = _error("EligibleLeadersNotAvailableError", 83,
                                          "ELIGIBLE_LEADERS_NOT_AVAILABLE", retriable=True)
ElectionNotNeededError = _error("ElectionNotNeededError", 84, "ELECTION_NOT_NEEDED")
NoReassignmentInProgressError = _error("NoReassignmentInProgressError", 85,
                                       "NO_REASSIGNMENT_IN_PROGRESS")
GroupSubscribedToTopicError = _error("GroupSubscribedToTopicError", 86,
                                     "GROUP_SUBSCRIBED_TO_TOPIC")
InvalidRecordError = _error("InvalidRecordError", 87, "INVALID_RECORD")
ProducerFencedError = _error("ProducerFencedError", 90, "PRODUCER_FENCED")
UnstableOffsetCommitError = _error("UnstableOffsetCommitError", 88, "UNSTABLE_OFFSET_COMMIT",
                                   retriable=True)
ResourceNotFoundError = _error("ResourceNotFoundError", 91, "RESOURCE_NOT_FOUND")
DuplicateResourceError = _error("DuplicateResourceError", 92, "DUPLICATE_RESOURCE")
UnacceptableCredentialError = _error("UnacceptableCredentialError", 93,
                                     "UNACCEPTABLE_CREDENTIAL")
InvalidUpdateVersionError = _error("InvalidUpdateVersionError", 95, "INVALID_UPDATE_VERSION")
UnknownTopicIdError = _error("UnknownTopicIdError", 100, "UNKNOWN_TOPIC_ID", retriable=True)
TransactionalIdNotFoundError = _error("TransactionalIdNotFoundError", 105,
                                      "TRANSACTIONAL_ID_NOT_FOUND")


# Client-side errors that have no protocol code in Kafka (Java exceptions thrown locally).
class KafkaTimeoutError(KafkaError):
    """An operation did not complete within its deadline (Kafka's TimeoutException)."""
    name = "TIMEOUT"
    retriable = True


class IllegalStateError(KafkaError):
    """A call that the client's current state does not allow (Kafka's
    IllegalStateException), e.g. subscribe() after assign()."""
    name = "ILLEGAL_STATE"


class CorruptIndexError(KafkaError):
    """An index file failed its sanity check; the log rebuilds it (Kafka's CorruptIndexException)."""
    name = "CORRUPT_INDEX"


class InvalidOffsetError(KafkaError):
    """An append would break the log's monotonically increasing offsets
    (Kafka's InvalidOffsetException, thrown by the index and by follower appends)."""
    name = "INVALID_OFFSET"


def error_for_code(code: int, message: str = "") -> KafkaError:
    """Rebuild the exception for a wire ``(code, message)`` pair; 0 is not an error."""
    if code == 0:
        raise ValueError("error code 0 (NONE) is not an error")
    return _BY_CODE.get(code, KafkaError)(message)


def raise_for_code(code: int, message: str = "") -> None:
    if code != 0:
        raise error_for_code(code, message)
