"""A transactional ``ListenerProducer``'s calls to its coordinators, over the Kafka listener,
as Kafka's producer makes them: InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn and
EndTxn to the transactional id's coordinator, TxnOffsetCommit to the group's (each found
with FindCoordinator and looked up again when it moves). The decisions (the transaction's
state, which partitions it holds, what an error means) are ``TransactionManager``'s, the same
as ``rafka.Producer``'s through Ray (``rafka.producer.transaction_manager``); this module only
asks and hands it the answers. Each call blocks until answered, as Kafka's transactional
methods do.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Mapping

from protocols.errors import KafkaError, KafkaTimeoutError, OperationNotAttemptedError, \
    error_for_code
from protocols.kafka.api_keys import ApiKey
from protocols.messages import offsets_to_commit
from protocols.topics import GROUP_KEY_TYPE, TRANSACTION_KEY_TYPE, TopicPartition
from rafka.producer.transaction_manager import (State, TransactionManager, coordinator_error,
                                                offset_commit_error, should_retry)

if TYPE_CHECKING:
    from rafka.client.listener_producer import ListenerProducer
    from rafka.consumer.coordinator import ConsumerGroupMetadata

INIT_PRODUCER_ID_VERSION = 4
ADD_PARTITIONS_TO_TXN_VERSION = 3   # the last a client sends (v4 is the brokers', KIP-890)
ADD_OFFSETS_TO_TXN_VERSION = 3
TXN_OFFSET_COMMIT_VERSION = 3
END_TXN_VERSION = 3


def _error_code(body) -> KafkaError | None:
    code = body.error_code.value
    return None if code == 0 else error_for_code(code)


def _first_error(codes) -> KafkaError | None:
    """The error of a per-partition answer: the first partition's that is not
    OPERATION_NOT_ATTEMPTED (which only says another partition failed)."""
    found = None
    for code in codes:
        if code and (found is None or found == OperationNotAttemptedError.code):
            found = code
    return None if found is None else error_for_code(found)


class ListenerTransactions:
    def __init__(self, producer: "ListenerProducer", transactional_id: str, timeout_ms: int):
        self.producer = producer
        self.txn = TransactionManager(transactional_id, timeout_ms)
        self.transactional_id = transactional_id
        config = producer.config
        self._backoff_s = config["retry.backoff.ms"] / 1000
        self._max_block_s = config["max.block.ms"] / 1000
        self._request_timeout_s = config["request.timeout.ms"] / 1000

    def _deadline(self, timeout: float | None) -> float:
        return time.monotonic() + (self._max_block_s if timeout is None else timeout)

    def _ask(self, key_type: int, key: str, api_key: int, version: int, values: dict,
             error_of, deadline: float):
        """(body, error) of a coordinator's answer, asked again while Kafka's producer
        would (a moved or loading coordinator, a transaction still completing); an old
        epoch taken as fenced."""
        body, error = self.producer._coordinator_request(
            key_type, key, api_key, version, values, error_of, deadline, self._backoff_s,
            retry=should_retry)
        return body, coordinator_error(error)

    # ---- the calls -------------------------------------------------------------------------
    def init(self, timeout: float | None) -> None:
        self._init_producer_id(self.txn.begin_init(), self._deadline(timeout))

    def begin(self) -> None:
        self.txn.begin_transaction()

    def add_partitions(self, deadline: float) -> None:
        """The transaction's new partitions join it (one AddPartitionsToTxn for them all),
        before any of their batches is sent; asked again next round while retriable."""
        txn = self.txn
        tps = txn.partitions_to_add()
        if not tps:
            return
        topics: dict[str, list[int]] = {}
        for tp in tps:
            topics.setdefault(tp.topic, []).append(tp.partition)
        values = {"v3_and_below_transactional_id": self.transactional_id,
                  "v3_and_below_producer_id": txn.producer_id,
                  "v3_and_below_producer_epoch": txn.producer_epoch,
                  "v3_and_below_topics": [{"name": t, "partitions": ps}
                                          for t, ps in topics.items()]}
        _, error = self._ask(TRANSACTION_KEY_TYPE, self.transactional_id,
                             ApiKey.ADD_PARTITIONS_TO_TXN, ADD_PARTITIONS_TO_TXN_VERSION,
                             values, lambda body: _first_error(
                                 p.partition_error_code.value
                                 for t in body.results_by_topic_v3_and_below
                                 for p in t.results_by_partition), deadline)
        txn.on_partitions_added(tps, error)

    def send_offsets(self, offsets: Mapping, group: "ConsumerGroupMetadata",
                     timeout: float | None) -> None:
        """The group's offsets committed with the transaction: the group's coordinator
        refuses them for a member the group has moved past (``group``'s generation and
        member id; -1 and none from a producer outside the group)."""
        txn = self.txn
        deadline = self._deadline(timeout)
        txn.begin_add_offsets()
        group_id = group.group_id
        values = {"transactional_id": self.transactional_id, "producer_id": txn.producer_id,
                  "producer_epoch": txn.producer_epoch, "group_id": group_id}
        _, error = self._ask(TRANSACTION_KEY_TYPE, self.transactional_id,
                             ApiKey.ADD_OFFSETS_TO_TXN, ADD_OFFSETS_TO_TXN_VERSION, values,
                             _error_code, deadline)
        if error is None:
            txn.on_offsets_added(None)   # its end must be told from now on
            topics: dict[str, list] = {}
            for tp, om in offsets_to_commit(offsets).items():
                topics.setdefault(tp.topic, []).append({
                    "partition_index": tp.partition, "committed_offset": om.offset,
                    "committed_leader_epoch": om.leader_epoch,
                    "committed_metadata": om.metadata})
            values = {"transactional_id": self.transactional_id, "group_id": group_id,
                      "producer_id": txn.producer_id, "producer_epoch": txn.producer_epoch,
                      "generation_id": group.generation_id, "member_id": group.member_id,
                      "group_instance_id": group.group_instance_id,
                      "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}
            _, error = self._ask(GROUP_KEY_TYPE, group_id, ApiKey.TXN_OFFSET_COMMIT,
                                 TXN_OFFSET_COMMIT_VERSION, values,
                                 lambda body: _first_error(p.error_code.value
                                                           for t in body.topics
                                                           for p in t.partitions), deadline)
            error = offset_commit_error(error, group_id)
        if error is not None and should_retry(error):
            raise KafkaTimeoutError(f"Timeout expired while sending offsets to the "
                                    f"transaction: {error}")   # the call may be made again
        if error is not None:
            txn.on_offsets_added(error)
            raise error

    def commit(self, timeout: float | None) -> None:
        deadline = self._deadline(timeout)
        if self.txn.state is not State.COMMITTING_TRANSACTION:   # else: EndTxn asked again
            # KafkaTimeoutError when it takes longer: the call may be made again.
            self.producer.flush(max(0.0, deadline - time.monotonic()))
        # EndTxn gets at least a request's time, however long the flush took.
        deadline = max(deadline, time.monotonic() + self._request_timeout_s)
        self._end(self.txn.begin_commit(), True, deadline)

    def abort(self, timeout: float | None) -> None:
        deadline = self._deadline(timeout)
        if self.txn.bump_pending():   # aborted, but its new epoch timed out: asked again
            self._init_producer_id((self.txn.producer_id, self.txn.producer_epoch), deadline)
            return
        needs_end = self.txn.begin_abort()
        self.producer._fail_queued(None)   # what was not sent is never sent
        self._end(needs_end, False, deadline)

    def close(self, timeout: float) -> None:
        """Kafka's producer on close: a commit under way is finished, an open
        transaction aborted (rather than left to transaction.timeout.ms, holding back
        read_committed readers); what is queued in a failed one is dropped."""
        state = self.txn.state
        if state is State.COMMITTING_TRANSACTION:
            self.commit(timeout)
        elif state in (State.IN_TRANSACTION, State.ABORTABLE_ERROR,
                       State.ABORTING_TRANSACTION) or self.txn.bump_pending():
            self.abort(timeout)
        elif state is State.FATAL_ERROR:
            self.producer._fail_queued(self.txn.last_error)

    # ---- helpers ---------------------------------------------------------------------------
    def _end(self, needs_end: bool, commit: bool, deadline: float) -> None:
        txn = self.txn
        error = None
        if needs_end:
            values = {"transactional_id": self.transactional_id,
                      "producer_id": txn.producer_id, "producer_epoch": txn.producer_epoch,
                      "committed": commit}
            _, error = self._ask(TRANSACTION_KEY_TYPE, self.transactional_id, ApiKey.END_TXN,
                                 END_TXN_VERSION, values, _error_code, deadline)
        if txn.on_end(error):
            raise KafkaTimeoutError(f"Timeout expired before the transaction could be "
                                    f"{'committed' if commit else 'aborted'}: {error}")
        if txn.state is State.INITIALIZING:
            # The aborted transaction left gaps in its partitions' sequences: a new epoch
            # (KIP-360).
            self._init_producer_id((txn.producer_id, txn.producer_epoch), deadline)

    def _init_producer_id(self, expected: tuple[int, int] | None, deadline: float) -> None:
        values = {"transactional_id": self.transactional_id,
                  "transaction_timeout": self.txn.transaction_timeout_ms,
                  "producer_id": -1 if expected is None else expected[0],
                  "producer_epoch": -1 if expected is None else expected[1]}
        body, error = self._ask(TRANSACTION_KEY_TYPE, self.transactional_id,
                                ApiKey.INIT_PRODUCER_ID, INIT_PRODUCER_ID_VERSION, values,
                                _error_code, deadline)
        if error is not None and should_retry(error):
            raise KafkaTimeoutError(f"Timeout expired while initializing transactional "
                                    f"state: {error}")
        self.txn.on_init(error if error is not None else
                         (int(body.producer_id), int(body.producer_epoch)))
        self.producer._use_producer_id(self.txn.producer_id, self.txn.producer_epoch)

    def raise_if_failed(self) -> None:
        """Nothing more is sent in a transaction that can only abort (or a producer that
        can only close): its error."""
        if self.txn.state in (State.ABORTABLE_ERROR, State.FATAL_ERROR):
            raise self.txn.last_error or KafkaError("The transaction must be aborted")

    def partition_ready(self, tp: TopicPartition) -> bool:
        return self.txn.send_allowed(tp)
