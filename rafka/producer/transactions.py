"""The transactional producer's calls to its coordinators (the shell of Kafka's
TransactionManager): InitProducerId, AddOffsetsToTxn and EndTxn to the transactional id's
coordinator, TxnOffsetCommit to the group's. Each call is made from the application's
thread and blocks until answered, as Kafka's transactional methods do; the decisions are
``TransactionManager``'s (``rafka.producer.transaction_manager``), held under the producer's
lock. AddPartitionsToTxn is the sender thread's (``rafka.producer.sender_thread``).
"""
from __future__ import annotations

import time
from typing import Any, Mapping

from protocols.errors import KafkaError, KafkaTimeoutError
from protocols.messages import offsets_to_commit
from protocols.topics import GROUP_KEY_TYPE
from rafka.client.coordinator_client import CoordinatorClient
from rafka.producer.transaction_manager import (State, TransactionManager, coordinator_error,
                                                offset_commit_error, should_retry)


def coordinator_client(cluster, metadata, key: str, config: Mapping[str, Any],
                       key_type: int = GROUP_KEY_TYPE, door=None) -> CoordinatorClient:
    return CoordinatorClient(cluster, metadata, key, config["request.timeout.ms"],
                             config["retry.backoff.ms"], key_type=key_type, door=door)


class Transactions:
    def __init__(self, producer, txn: TransactionManager, client: CoordinatorClient):
        self.producer = producer
        self.txn = txn
        self.client = client                 # the transactional id's coordinator
        self.transactional_id = txn.transactional_id
        self._group_clients: dict[str, CoordinatorClient] = {}
        config = producer.config
        self._timeout_ms = config["transaction.timeout.ms"]
        self._backoff_s = config["retry.backoff.ms"] / 1000
        self._max_block_s = config["max.block.ms"] / 1000

    def _deadline(self, timeout: float | None) -> float:
        return time.monotonic() + (self._max_block_s if timeout is None else timeout)

    # ---- the calls -------------------------------------------------------------------------
    def init(self, timeout: float | None) -> None:
        deadline = self._deadline(timeout)
        with self.producer._lock:
            expected = self.txn.begin_init()
        self._init_producer_id(expected, deadline)

    def begin(self) -> None:
        with self.producer._lock:
            self.txn.begin_transaction()

    def send_offsets(self, offsets: Mapping, group_metadata: Any,
                     timeout: float | None) -> None:
        from rafka.consumer.coordinator import ConsumerGroupMetadata
        txn = self.txn
        meta = group_metadata if isinstance(group_metadata, ConsumerGroupMetadata) \
            else ConsumerGroupMetadata(str(group_metadata))
        deadline = self._deadline(timeout)
        with self.producer._lock:
            txn.begin_add_offsets()
            producer_id, epoch = txn.producer_id, txn.producer_epoch
        error = self._call(self.client, "add_offsets_to_txn", deadline, self.transactional_id,
                           producer_id, epoch, meta.group_id)
        if error is None:
            with self.producer._lock:
                txn.on_offsets_added(None)   # its end must be told from now on
            rows = [(tp.topic, tp.partition, om.offset, om.leader_epoch, om.metadata)
                    for tp, om in offsets_to_commit(offsets).items()]
            error = self._call(self._group_client(meta.group_id), "txn_commit_offsets",
                               deadline, self.transactional_id, meta.group_id, producer_id,
                               epoch, meta.member_id, meta.generation_id, rows,
                               meta.group_instance_id)
            error = offset_commit_error(error, meta.group_id)
        if isinstance(error, KafkaError) and should_retry(error):
            raise KafkaTimeoutError(f"Timeout expired while sending offsets to the "
                                    f"transaction: {error}")   # the call may be made again
        if error is not None:
            with self.producer._lock:
                txn.on_offsets_added(error)
            raise error

    def commit(self, timeout: float | None) -> None:
        deadline = self._deadline(timeout)
        self.producer.flush(max(0.0, deadline - time.monotonic()))
        with self.producer._lock:
            needs_end = self.txn.begin_commit()
        self._end(needs_end, True, deadline)

    def abort(self, timeout: float | None) -> None:
        deadline = self._deadline(timeout)
        with self.producer._lock:
            bump = self.txn.bump_pending()
            expected = (self.txn.producer_id, self.txn.producer_epoch)
        if bump:   # aborted, but its new epoch timed out: asked again
            self._init_producer_id(expected, deadline)
            return
        with self.producer._cond:
            needs_end = self.txn.begin_abort()
            self.producer._cond.notify_all()      # the sender fails what is not yet sent
        self.producer.flush(max(0.0, deadline - time.monotonic()))
        self._end(needs_end, False, deadline)

    # ---- helpers ---------------------------------------------------------------------------
    def _end(self, needs_end: bool, commit: bool, deadline: float) -> None:
        txn = self.txn
        answer = None
        if needs_end:
            answer = self._call(self.client, "end_txn", deadline, self.transactional_id,
                                txn.producer_id, txn.producer_epoch, commit)
        with self.producer._lock:
            if txn.on_end(answer):
                raise KafkaTimeoutError(f"Timeout expired before the transaction could be "
                                        f"{'committed' if commit else 'aborted'}: {answer}")
            bump = txn.state is State.INITIALIZING
            expected = (txn.producer_id, txn.producer_epoch)
        if bump:
            # The aborted transaction left gaps in its partitions' sequences: a new epoch.
            self._init_producer_id(expected, deadline)

    def _init_producer_id(self, expected: tuple[int, int] | None, deadline: float) -> None:
        answer = self._call(self.client, "init_producer_id", deadline, self.transactional_id,
                            self._timeout_ms, expected)
        if isinstance(answer, KafkaError) and should_retry(answer):
            raise KafkaTimeoutError(f"Timeout expired while initializing transactional "
                                    f"state: {answer}")
        producer = self.producer
        with producer._cond:
            self.txn.on_init(answer)
            producer._sender.state.set_producer_id(self.txn.producer_id,
                                                   self.txn.producer_epoch)
            producer._cond.notify_all()

    def _call(self, client: CoordinatorClient, method: str, deadline: float,
              *args: Any) -> Any:
        """One request to a coordinator, asked again while its answer says to (a moved or
        loading coordinator, a transaction still completing) until ``deadline``; the
        answer (None or the error), an old epoch taken as fenced."""
        while True:
            answer = coordinator_error(client.call(method, *args, deadline=deadline))
            if not (isinstance(answer, KafkaError) and should_retry(answer)) \
                    or time.monotonic() + self._backoff_s >= deadline:
                return answer
            time.sleep(self._backoff_s)

    def _group_client(self, group_id: str) -> CoordinatorClient:
        client = self._group_clients.get(group_id)
        if client is None:
            client = self._group_clients[group_id] = coordinator_client(
                self.producer.cluster, self.producer.metadata, group_id, self.producer.config,
                door=self.producer.door)
        return client
