"""TransactionCoordinator: one broker's transaction coordinator, pure (Kafka's
TransactionCoordinator, the in-memory half of its TransactionStateManager, and the decisions
of TransactionMarkerChannelManager and TransactionMarkerRequestCompletionHandler). No Ray,
no I/O; time is passed in.

A transactional id lives in ``__transaction_state`` partition
``coordinator_partition_for(transactional_id)``; the broker leading that partition
coordinates it, and the partition's leader epoch is the coordinator epoch every marker
carries (a deposed coordinator's markers are refused as TRANSACTION_COORDINATOR_FENCED).

Every request returns ``(request id, Effects)`` for the shell (``actor.py``) to perform:

- ``replies``: the answer to a request, by its id (an EndTxn is answered once its
  PrepareCommit / PrepareAbort record is in the log, before any marker is written: Kafka's
  order, so the client never waits for the markers);
- ``writes``: one transactional id's new state to append to its ``__transaction_state``
  partition (acks=all); the shell reports the outcome to ``on_write_done``, and only then
  does the state change (``TransactionMetadata.complete_transition``);
- ``markers``: COMMIT or ABORT markers to write to a transaction's data partitions through
  their leaders (Kafka's WriteTxnMarkers); the shell reports each partition's outcome to
  ``on_markers_done``. Retriable failures come back as markers to send again, after
  ``retry.backoff.ms``; when every partition has its marker the CompleteCommit /
  CompleteAbort record is written.

Periodic work is the shell's timer calling ``abort_timed_out_transactions`` (every
``transaction.abort.timed.out.transaction.cleanup.interval.ms``) and
``expire_transactional_ids`` (every
``transaction.remove.expired.transaction.cleanup.interval.ms``).
"""
from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, NamedTuple

from actors.txn.metadata import (NO_PRODUCER_EPOCH, IllegalTransition, TransactionMetadata,
                                 TransactionState, TxnTransitMetadata, is_epoch_exhausted)
from actors.txn.transaction_log import key_bytes, replay, value_bytes
from protocols.errors import (ConcurrentTransactionsError, CoordinatorLoadInProgressError,
                              CoordinatorNotAvailableError, InvalidProducerEpochError,
                              InvalidProducerIdMappingError, InvalidRequestError,
                              InvalidTransactionTimeoutError, InvalidTxnStateError, KafkaError,
                              KafkaStorageError, NotCoordinatorError, NotEnoughReplicasError,
                              NotEnoughReplicasAfterAppendError, NotLeaderOrFollowerError,
                              ProducerFencedError, RecordListTooLargeError,
                              RecordTooLargeError, RequestTimedOutError,
                              TransactionCoordinatorFencedError, TransactionalIdNotFoundError,
                              UnknownTopicOrPartitionError, UnsupportedVersionError)
from protocols.java_hash import coordinator_partition_for
from protocols.records import Record
from protocols.topics import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, TopicPartition

S = TransactionState


@dataclass(frozen=True)
class TxnConfig:
    """The broker's settings the coordinator's decisions read (Kafka's names)."""
    num_partitions: int = 50                           # transaction.state.log.num.partitions
    max_timeout_ms: int = 900_000                      # transaction.max.timeout.ms
    transactional_id_expiration_ms: int = 604_800_000  # transactional.id.expiration.ms
    offsets_partitions: int = 50                       # offsets.topic.num.partitions
    retry_backoff_ms: int = 100                        # between rounds of markers
    # How long AddPartitionsToTxn may wait for the last transaction's completion.
    completion_wait_ms: int = 1000


class InitProducerIdResult(NamedTuple):
    """InitProducerId's answer (a plain tuple on the wire)."""
    producer_id: int
    producer_epoch: int


@dataclass
class TxnWrite:
    """A transactional id's next state (``transit``) to append to ``__transaction_state``-
    ``partition`` while this broker leads it in ``coordinator_epoch``. A Dead transit is
    written as a tombstone (the id expired). ``then`` (the core's) says what follows."""
    partition: int
    coordinator_epoch: int
    transactional_id: str
    transit: TxnTransitMetadata
    now_ms: int
    then: Callable[[KafkaError | None, int], "Effects"] = field(repr=False)
    delay_ms: int = 0
    # Writes of CompleteCommit / CompleteAbort are retried while the partition cannot take
    # them: the state stays pending meanwhile (Kafka's retryOnError for the marker's
    # completion).
    retry_while_unavailable: bool = False

    @property
    def record(self) -> Record:
        value = None if self.transit.state is S.DEAD else value_bytes(self.transit)
        return Record(key_bytes(self.transactional_id), value, timestamp=self.now_ms)


@dataclass(frozen=True)
class MarkerSend:
    """Markers to append to ``partitions`` (Kafka's WriteTxnMarkers entry)."""
    transactional_id: str
    coordinator_epoch: int
    producer_id: int
    producer_epoch: int
    commit: bool
    partitions: frozenset
    delay_ms: int = 0


class _Gone:
    """A marker's partition whose topic no longer exists: nothing waits for its marker."""

    def __repr__(self) -> str:
        return "PARTITION_GONE"


PARTITION_GONE = _Gone()


@dataclass
class Effects:
    replies: list[tuple[int, Any]] = field(default_factory=list)
    writes: list[TxnWrite] = field(default_factory=list)
    markers: list[MarkerSend] = field(default_factory=list)
    # (transactional id, request, deadline ms): call completion_wait_over then.
    waits: list[tuple[str, int, int]] = field(default_factory=list)

    def add(self, other: "Effects") -> "Effects":
        self.replies += other.replies
        self.writes += other.writes
        self.markers += other.markers
        self.waits += other.waits
        return self


Reply = Callable[[Any], Effects]


def _no_reply(_answer: Any) -> Effects:
    return Effects()


def store_error(e: BaseException) -> KafkaError:
    """Kafka's mapping of a failed append to ``__transaction_state`` onto the error its
    client hears (TransactionStateManager.appendTransactionToLog)."""
    if isinstance(e, (UnknownTopicOrPartitionError, NotEnoughReplicasError,
                      NotEnoughReplicasAfterAppendError, RequestTimedOutError)):
        return CoordinatorNotAvailableError(f"Could not write to {TRANSACTION_STATE_TOPIC}: {e}")
    if isinstance(e, (NotLeaderOrFollowerError, KafkaStorageError, NotCoordinatorError)):
        return NotCoordinatorError(f"This broker no longer leads the transaction's "
                                   f"partition: {e}")
    if isinstance(e, (RecordTooLargeError, RecordListTooLargeError)):
        return KafkaError(f"The transaction's state does not fit in a record: {e}")
    if isinstance(e, KafkaError):
        return e
    return CoordinatorNotAvailableError(f"Could not write to {TRANSACTION_STATE_TOPIC}: {e!r}")


def verification_error_for_produce(error: KafkaError) -> KafkaError:
    """What a producer hears when its transaction's first batch at a partition was not
    verified (Kafka's AddPartitionsToTxnManager): a coordinator that cannot answer now, or
    a transaction still completing, is NOT_ENOUGH_REPLICAS (the producer retries); a fenced
    producer is INVALID_PRODUCER_EPOCH; anything else is as the coordinator said."""
    if isinstance(error, (NotCoordinatorError, CoordinatorNotAvailableError,
                          CoordinatorLoadInProgressError, ConcurrentTransactionsError)):
        return NotEnoughReplicasError(f"The transaction coordinator could not verify the "
                                      f"transaction now ({error.name}: {error}); retry")
    if isinstance(error, ProducerFencedError):
        return InvalidProducerEpochError(str(error))
    return error


# Marker outcomes (Kafka's TransactionMarkerRequestCompletionHandler): sent again, or the
# transaction is no longer this coordinator's to finish.
_RETRY_MARKER = (UnknownTopicOrPartitionError, NotLeaderOrFollowerError, NotEnoughReplicasError,
                 NotEnoughReplicasAfterAppendError, RequestTimedOutError, KafkaStorageError,
                 NotCoordinatorError, CoordinatorNotAvailableError)
_ABANDON_MARKERS = (InvalidProducerEpochError, TransactionCoordinatorFencedError)


class TransactionCoordinator:
    def __init__(self, broker_id: int, config: TxnConfig = TxnConfig()):
        self.broker_id = broker_id
        self.config = config
        # __transaction_state partitions led here (partition -> coordinator epoch), and
        # those of them still being read.
        self.owned: dict[int, int] = {}
        self.loading: set[int] = set()
        self.txns: dict[str, TransactionMetadata] = {}
        # Producer ids handed out by the controller in blocks (Kafka's ProducerIdManager).
        self.producer_ids: deque[int] = deque()
        # Transactions whose markers are being written: the completion to write after them.
        self._completing: dict[str, TxnTransitMetadata] = {}
        # Requests waiting for a transaction's completion: id -> request -> how to serve it.
        self._awaiting_completion: dict[str, dict[int, Callable[[int], Effects]]] = {}
        self._ids = itertools.count(1)

    def new_request(self) -> int:
        return next(self._ids)

    # ---- producer ids ----------------------------------------------------------------------
    @property
    def needs_producer_ids(self) -> bool:
        return not self.producer_ids

    def add_producer_ids(self, first: int, count: int) -> None:
        self.producer_ids.extend(range(first, first + count))

    def _new_producer_id(self) -> int:
        if not self.producer_ids:
            raise CoordinatorNotAvailableError("The coordinator is waiting for a block of "
                                               "producer ids from the controller")
        return self.producer_ids.popleft()

    # ---- partition ownership (from the broker) ---------------------------------------------
    def partition_for(self, transactional_id: str) -> int:
        return coordinator_partition_for(transactional_id, self.config.num_partitions)

    def owns(self, partition: int) -> bool:
        return partition in self.owned

    def on_election(self, partition: int, coordinator_epoch: int) -> tuple[Effects, bool]:
        """This broker now leads the partition: (effects, whether to load it)."""
        if self.owned.get(partition) == coordinator_epoch:
            return Effects(), False
        effects = self.on_resignation(partition)
        self.owned[partition] = coordinator_epoch
        self.loading.add(partition)
        return effects, True

    def on_resignation(self, partition: int, coordinator_epoch: int | None = None) -> Effects:
        """The partition moved away: its transactions go (a write or marker in flight for
        them then finds the partition gone and is dropped; a request waiting hears
        NOT_COORDINATOR). A resignation for an older epoch than the one led is stale and
        ignored."""
        current = self.owned.get(partition)
        if coordinator_epoch is not None and current is not None \
                and coordinator_epoch < current:
            return Effects()
        self.owned.pop(partition, None)
        self.loading.discard(partition)
        effects = Effects()
        for transactional_id in [t for t in self.txns if self.partition_for(t) == partition]:
            del self.txns[transactional_id]
            self._completing.pop(transactional_id, None)
            effects.add(self._release_waiting(transactional_id, 0))
        return effects

    def on_loaded(self, partition: int, coordinator_epoch: int,
                  records: Iterable[tuple[bytes | None, bytes | None]], now_ms: int) -> Effects:
        """The partition's records, read from its start: its transactional ids' states. A
        transaction found in PrepareCommit or PrepareAbort has its markers written again
        (the coordinator before this one may have died among them)."""
        effects = Effects()
        if self.owned.get(partition) != coordinator_epoch or partition not in self.loading:
            return effects
        self.loading.discard(partition)
        for transactional_id, transit in replay(records).items():
            if self.partition_for(transactional_id) != partition:
                continue
            metadata = TransactionMetadata.from_transit(transactional_id, transit)
            self.txns[transactional_id] = metadata
            if metadata.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                effects.add(self._send_markers(metadata, coordinator_epoch,
                                               metadata.prepare_complete(now_ms)))
        return effects

    def _state(self, transactional_id: str) -> TransactionMetadata | None:
        """The id's metadata here (None: unknown), or the error why this coordinator may
        not serve it now."""
        partition = self.partition_for(transactional_id)
        if partition not in self.owned:
            raise NotCoordinatorError(f"Broker {self.broker_id} is not the coordinator of "
                                      f"transactional id {transactional_id}")
        if partition in self.loading:
            raise CoordinatorLoadInProgressError(
                f"Broker {self.broker_id} is loading the transactions of "
                f"{TRANSACTION_STATE_TOPIC}-{partition}")
        return self.txns.get(transactional_id)

    # ---- writing ---------------------------------------------------------------------------
    def _write(self, metadata: TransactionMetadata, transit: TxnTransitMetadata, now_ms: int,
               then: Callable[[KafkaError | None, int], Effects],
               retry_while_unavailable: bool = False, delay_ms: int = 0) -> Effects:
        partition = self.partition_for(metadata.transactional_id)
        return Effects(writes=[TxnWrite(partition, self.owned[partition],
                                        metadata.transactional_id, transit, now_ms, then,
                                        delay_ms, retry_while_unavailable)])

    def on_write_done(self, write: TxnWrite, error: BaseException | None,
                      now_ms: int) -> Effects:
        """A write's outcome (None: appended and replicated). The state changes only if the
        partition is still led in the epoch the write was made in: otherwise another
        coordinator serves the id now, and the client hears NOT_COORDINATOR."""
        metadata = self.txns.get(write.transactional_id)
        if self.owned.get(write.partition) != write.coordinator_epoch or metadata is None \
                or write.partition in self.loading:
            return write.then(NotCoordinatorError(
                f"{TRANSACTION_STATE_TOPIC}-{write.partition} moved while writing the state "
                f"of transactional id {write.transactional_id}"), now_ms)
        if error is None:
            if write.transit.state is S.DEAD:
                # Kafka never completes Dead: the tombstone's success removes the id.
                if metadata.pending_state is S.DEAD \
                        and metadata.producer_epoch == write.transit.producer_epoch:
                    del self.txns[write.transactional_id]
                else:
                    metadata.pending_state = None
            else:
                metadata.complete_transition(write.transit)
            return write.then(None, now_ms)
        failure = store_error(error)
        if not (write.retry_while_unavailable
                and isinstance(failure, CoordinatorNotAvailableError)):
            metadata.abort_pending()
        return write.then(failure, now_ms)

    # ---- InitProducerId --------------------------------------------------------------------
    def init_producer_id(self, transactional_id: str | None, txn_timeout_ms: int,
                         expected: tuple[int, int] | None, now_ms: int) -> tuple[int, Effects]:
        """InitProducerId with a transactional id: its producer id and a new epoch (fencing
        every older instance of the producer). ``expected``: the (producer id, epoch) a
        producer recovering from an error gives (KIP-360). The answer is an
        ``InitProducerIdResult`` or an error."""
        request = self.new_request()
        reply = self._reply_to(request)
        if not transactional_id:
            return request, reply(InvalidRequestError(
                "The transactional id must not be empty"))
        if not 0 < txn_timeout_ms <= self.config.max_timeout_ms:
            return request, reply(InvalidTransactionTimeoutError(
                f"The transaction timeout {txn_timeout_ms} ms is larger than the maximum "
                f"value allowed by the broker (as configured by transaction.max.timeout.ms, "
                f"{self.config.max_timeout_ms}) or not positive"))
        try:
            metadata = self._state(transactional_id)
            if metadata is None:
                metadata = self.txns[transactional_id] = TransactionMetadata(
                    transactional_id, self._new_producer_id(), txn_timeout_ms=txn_timeout_ms,
                    txn_last_update_timestamp=now_ms)
            transit = self._prepare_init(metadata, txn_timeout_ms, expected, now_ms)
        except KafkaError as e:
            return request, reply(e)
        if transit.state is S.PREPARE_EPOCH_FENCE:
            # The id has a transaction open: abort it with a bumped epoch, and have the new
            # producer retry (its retry bumps the epoch again, past the fence).
            return request, self._end_transaction(
                transactional_id, transit.producer_id, transit.producer_epoch, False, False,
                now_ms, lambda error: reply(error or ConcurrentTransactionsError(
                    f"The coordinator is aborting transactional id {transactional_id}'s open "
                    "transaction; retry")))

        def then(error: KafkaError | None, _now: int) -> Effects:
            return reply(error or InitProducerIdResult(transit.producer_id,
                                                       transit.producer_epoch))
        return request, self._write(metadata, transit, now_ms, then)

    def _prepare_init(self, metadata: TransactionMetadata, txn_timeout_ms: int,
                      expected: tuple[int, int] | None, now_ms: int) -> TxnTransitMetadata:
        if metadata.pending_state is not None:
            raise ConcurrentTransactionsError(
                f"Transactional id {metadata.transactional_id} has a state change in "
                "progress; retry")
        if expected is not None:
            expected_id, expected_epoch = expected
            # A producer that names its id and epoch is fenced unless the id is new, the
            # producer id is the current one (its epoch is checked below), or it is the one
            # before a rotation and its epoch was exhausted (a retry of the rotating call).
            if not (metadata.producer_epoch == NO_PRODUCER_EPOCH
                    or expected_id == metadata.producer_id
                    or (expected_id == metadata.prev_producer_id
                        and is_epoch_exhausted(expected_epoch))):
                raise ProducerFencedError(
                    f"Producer id {expected_id} is not transactional id "
                    f"{metadata.transactional_id}'s current producer id "
                    f"{metadata.producer_id}: a newer producer fenced it")
        state = metadata.state
        if state in (S.PREPARE_ABORT, S.PREPARE_COMMIT):
            raise ConcurrentTransactionsError(
                f"Transactional id {metadata.transactional_id} is completing a transaction "
                f"({state.state_name}); retry")
        if state in (S.COMPLETE_ABORT, S.COMPLETE_COMMIT, S.EMPTY):
            if is_epoch_exhausted(metadata.producer_epoch) and (
                    expected is None or expected[1] == metadata.producer_epoch):
                return metadata.prepare_producer_id_rotation(
                    self._new_producer_id(), txn_timeout_ms, now_ms, expected is not None)
            return metadata.prepare_increment_producer_epoch(
                txn_timeout_ms, None if expected is None else expected[1], now_ms)
        if state is S.ONGOING:
            return metadata.prepare_fence_producer_epoch()
        raise IllegalTransition(f"Found transactional id {metadata.transactional_id} with "
                                f"state {state.state_name}. This is illegal as we should "
                                "never have transitioned to this state.")

    # ---- AddPartitionsToTxn / AddOffsetsToTxn ----------------------------------------------
    def add_partitions_to_txn(self, transactional_id: str, producer_id: int,
                              producer_epoch: int, partitions: Iterable[TopicPartition],
                              now_ms: int) -> tuple[int, Effects]:
        """The producer is about to write to ``partitions`` in its transaction: they join
        it (the answer is None, or the one error for all of them).

        The producer's next transaction usually asks while its last one's markers are still
        being written. Kafka answers CONCURRENT_TRANSACTIONS and the client retries after
        its backoff (librdkafka's grows to a second); here the request waits for the
        completion instead, up to ``completion_wait_ms`` (``Effects.waits``: the shell calls
        ``completion_wait_over`` then), and is served as it would have been on retry."""
        request = self.new_request()
        partitions = frozenset(TopicPartition(*tp) for tp in partitions)
        return request, self._add_partitions(request, transactional_id, producer_id,
                                             producer_epoch, partitions, now_ms, True)

    def _add_partitions(self, request: int, transactional_id: str, producer_id: int,
                        producer_epoch: int, partitions: frozenset, now_ms: int,
                        may_wait: bool) -> Effects:
        reply = self._reply_to(request)
        if not transactional_id:
            return reply(InvalidRequestError("The transactional id must not be empty"))
        try:
            metadata = self._producer_state(transactional_id, producer_id, producer_epoch)
            if may_wait and transactional_id in self._completing \
                    and metadata.pending_state in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
                self._awaiting_completion.setdefault(transactional_id, {})[request] = \
                    lambda now: self._add_partitions(request, transactional_id, producer_id,
                                                     producer_epoch, partitions, now, False)
                return Effects(waits=[(transactional_id, request,
                                       now_ms + self.config.completion_wait_ms)])
            if metadata.pending_state is not None \
                    or metadata.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                raise ConcurrentTransactionsError(
                    f"Transactional id {transactional_id} is completing a transaction; retry")
        except KafkaError as e:
            return reply(e)
        if metadata.state is S.ONGOING and partitions <= metadata.topic_partitions:
            return reply(None)
        transit = metadata.prepare_add_partitions(partitions, now_ms)
        return self._write(metadata, transit, now_ms, lambda error, _now: reply(error))

    def completion_wait_over(self, transactional_id: str, request: int,
                             now_ms: int) -> Effects:
        """A request waiting for a transaction's completion waited long enough: served as
        things are (CONCURRENT_TRANSACTIONS if still completing)."""
        waiting = self._awaiting_completion.get(transactional_id, {})
        serve = waiting.pop(request, None)
        if not waiting:
            self._awaiting_completion.pop(transactional_id, None)
        return Effects() if serve is None else serve(now_ms)

    def _release_waiting(self, transactional_id: str, now_ms: int) -> Effects:
        """The transaction completed (or left this coordinator): the requests waiting for it
        are served now."""
        effects = Effects()
        for serve in self._awaiting_completion.pop(transactional_id, {}).values():
            effects.add(serve(now_ms))
        return effects

    def add_offsets_to_txn(self, transactional_id: str, producer_id: int,
                           producer_epoch: int, group_id: str, now_ms: int
                           ) -> tuple[int, Effects]:
        """The group's offsets are committed in the transaction: its
        ``__consumer_offsets`` partition joins the transaction, to get the marker."""
        partition = coordinator_partition_for(group_id, self.config.offsets_partitions)
        return self.add_partitions_to_txn(transactional_id, producer_id, producer_epoch,
                                          [TopicPartition(OFFSETS_TOPIC, partition)], now_ms)

    def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: Iterable[TopicPartition]) -> dict:
        """Whether each partition is in the producer's open transaction (KIP-890's
        verification, asked by a partition leader before a transactional batch is
        appended): ``{partition: None | error}``."""
        partitions = [TopicPartition(*tp) for tp in partitions]
        try:
            if not transactional_id:
                raise InvalidRequestError("The transactional id must not be empty")
            metadata = self._producer_state(transactional_id, producer_id, producer_epoch)
            if metadata.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                raise ConcurrentTransactionsError(
                    f"Transactional id {transactional_id} is completing a transaction")
        except KafkaError as e:
            return {tp: e for tp in partitions}
        return {tp: None if tp in metadata.topic_partitions and metadata.state is S.ONGOING
                else InvalidTxnStateError(
                    f"Partition {tp} is not in transactional id {transactional_id}'s "
                    "transaction: AddPartitionsToTxn must come before the produce")
                for tp in partitions}

    def _producer_state(self, transactional_id: str, producer_id: int,
                        producer_epoch: int) -> TransactionMetadata:
        metadata = self._state(transactional_id)
        if metadata is None or metadata.producer_id != producer_id:
            raise InvalidProducerIdMappingError(
                f"Producer id {producer_id} is not transactional id {transactional_id}'s")
        if metadata.producer_epoch != producer_epoch:
            raise ProducerFencedError(
                f"Epoch {producer_epoch} of transactional id {transactional_id} is fenced: "
                f"the current epoch is {metadata.producer_epoch}")
        return metadata

    # ---- EndTxn ----------------------------------------------------------------------------
    def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int,
                commit: bool, now_ms: int) -> tuple[int, Effects]:
        """EndTxn: commit or abort the open transaction (None, or the error)."""
        request = self.new_request()
        return request, self._end_transaction(transactional_id, producer_id, producer_epoch,
                                              commit, True, now_ms, self._reply_to(request))

    def _end_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int,
                         commit: bool, from_client: bool, now_ms: int,
                         reply: Reply) -> Effects:
        result = "COMMIT" if commit else "ABORT"
        fence = False
        if not transactional_id:
            return reply(InvalidRequestError("The transactional id must not be empty"))
        try:
            metadata = self._state(transactional_id)
            if metadata is None or metadata.producer_id != producer_id:
                raise InvalidProducerIdMappingError(
                    f"Producer id {producer_id} is not transactional id {transactional_id}'s")
            # A client's epoch must be the current one; the coordinator's own abort (a
            # fence) comes with the bumped epoch.
            if (from_client and producer_epoch != metadata.producer_epoch) \
                    or producer_epoch < metadata.producer_epoch:
                raise ProducerFencedError(
                    f"Epoch {producer_epoch} of transactional id {transactional_id} is "
                    f"fenced: the current epoch is {metadata.producer_epoch}")
            if metadata.pending_state not in (None, S.PREPARE_EPOCH_FENCE):
                raise ConcurrentTransactionsError(
                    f"Transactional id {transactional_id} has a state change in progress")
            state = metadata.state
            if state is S.ONGOING:
                fence = not commit and metadata.pending_state is S.PREPARE_EPOCH_FENCE
                if fence:
                    # The fence's bumped epoch goes into the PrepareAbort record.
                    metadata.pending_state = None
                    metadata.producer_epoch = producer_epoch
                    metadata.last_producer_epoch = NO_PRODUCER_EPOCH
                transit = metadata.prepare_abort_or_commit(
                    S.PREPARE_COMMIT if commit else S.PREPARE_ABORT, now_ms)
            elif state is (S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT):
                return reply(None)       # a retry of an EndTxn that completed
            elif state is (S.PREPARE_COMMIT if commit else S.PREPARE_ABORT):
                raise ConcurrentTransactionsError(
                    f"Transactional id {transactional_id} is completing its {result}; retry")
            elif state in (S.DEAD, S.PREPARE_EPOCH_FENCE):
                raise IllegalTransition(f"Found transactional id {transactional_id} with "
                                        f"state {state.state_name}. This is illegal as we "
                                        "should never have transitioned to this state.")
            else:
                raise InvalidTxnStateError(
                    f"Transactional id {transactional_id}'s state is {state.state_name}, "
                    f"which cannot take the transaction result {result}")
        except KafkaError as e:
            return reply(e)
        coordinator_epoch = self.owned[self.partition_for(transactional_id)]

        def then(error: KafkaError | None, now: int) -> Effects:
            if error is not None:
                if fence and self.owned.get(self.partition_for(transactional_id)) \
                        == coordinator_epoch and transactional_id in self.txns:
                    # The bumped epoch was never written nor told: the next fence reuses it.
                    self.txns[transactional_id].has_failed_epoch_fence = True
                return reply(error)
            current = self.txns[transactional_id]
            if current.producer_id != producer_id:
                return reply(InvalidProducerIdMappingError(
                    f"Producer id {producer_id} is not transactional id "
                    f"{transactional_id}'s"))
            if current.producer_epoch != producer_epoch:
                return reply(ProducerFencedError(
                    f"Epoch {producer_epoch} of transactional id {transactional_id} was "
                    "fenced while ending its transaction"))
            if current.pending_state is not None \
                    or current.state is not (S.PREPARE_COMMIT if commit else S.PREPARE_ABORT):
                return reply(InvalidTxnStateError(
                    f"Transactional id {transactional_id}'s state is "
                    f"{current.state.state_name} after writing {result}"))
            # The decision is in the log: the client hears now, the markers follow.
            return reply(None).add(self._send_markers(current, coordinator_epoch,
                                                      current.prepare_complete(now)))
        return self._write(metadata, transit, now_ms, then)

    # ---- markers ---------------------------------------------------------------------------
    def _send_markers(self, metadata: TransactionMetadata, coordinator_epoch: int,
                      complete: TxnTransitMetadata, delay_ms: int = 0) -> Effects:
        """Markers for every partition still without one; with none left, the
        transaction's completion is written."""
        self._completing[metadata.transactional_id] = complete
        if not metadata.topic_partitions:
            return self._write_completion(metadata, complete, delay_ms)
        return Effects(markers=[MarkerSend(
            metadata.transactional_id, coordinator_epoch, metadata.producer_id,
            metadata.producer_epoch, complete.state is S.COMPLETE_COMMIT,
            frozenset(metadata.topic_partitions), delay_ms)])

    def _write_completion(self, metadata: TransactionMetadata, complete: TxnTransitMetadata,
                          delay_ms: int = 0) -> Effects:
        transactional_id = metadata.transactional_id

        def then(error: KafkaError | None, now: int) -> Effects:
            if error is None or isinstance(error, NotCoordinatorError) \
                    or self.txns.get(transactional_id) is not metadata:
                # Done, or another coordinator finishes it (from the log's PrepareX).
                self._completing.pop(transactional_id, None)
                return self._release_waiting(transactional_id, now)
            # The partition could not take the record: try again (Kafka retries while its
            # coordinator leads the partition); a refused write left nothing pending.
            again = complete if metadata.pending_state is not None \
                else metadata.prepare_complete(now)
            self._completing[transactional_id] = again
            return self._write_completion(metadata, again, self.config.retry_backoff_ms)
        return self._write(metadata, complete, complete.txn_last_update_timestamp, then,
                           retry_while_unavailable=True, delay_ms=delay_ms)

    def on_markers_done(self, send: MarkerSend, results: dict, now_ms: int) -> Effects:
        """Each partition's outcome of ``send`` (None: the marker is in its log;
        ``PARTITION_GONE``: the topic was deleted; else the error). Markers of a
        transaction this coordinator no longer finishes are dropped."""
        metadata = self.txns.get(send.transactional_id)
        partition = self.partition_for(send.transactional_id)
        if metadata is None or self.owned.get(partition) != send.coordinator_epoch \
                or partition in self.loading \
                or send.transactional_id not in self._completing \
                or metadata.producer_id != send.producer_id:
            return Effects()
        retry = set()
        for tp, outcome in results.items():
            if outcome is None or outcome is PARTITION_GONE \
                    or isinstance(outcome, UnsupportedVersionError):
                metadata.topic_partitions.discard(TopicPartition(*tp))
            elif isinstance(outcome, _ABANDON_MARKERS):
                # The producer or the coordinator was fenced at the partition: a newer
                # coordinator (or epoch) finishes this transaction.
                return self._release_waiting(send.transactional_id, now_ms)
            else:
                retry.add(TopicPartition(*tp))
        if retry:
            return Effects(markers=[MarkerSend(
                send.transactional_id, send.coordinator_epoch, send.producer_id,
                send.producer_epoch, send.commit, frozenset(retry),
                self.config.retry_backoff_ms)])
        if metadata.topic_partitions:
            return Effects()     # other partitions' markers are still out
        return self._write_completion(metadata, self._completing[send.transactional_id])

    # ---- timeouts and expiration -----------------------------------------------------------
    def abort_timed_out_transactions(self, now_ms: int) -> Effects:
        """Every open transaction older than its ``transaction.timeout.ms`` is aborted by
        the coordinator, its producer fenced with a bumped epoch."""
        effects = Effects()
        for transactional_id, metadata in list(self.txns.items()):
            partition = self.partition_for(transactional_id)
            if partition not in self.owned or partition in self.loading \
                    or metadata.pending_state is not None or metadata.state is not S.ONGOING \
                    or metadata.txn_start_timestamp + metadata.txn_timeout_ms >= now_ms:
                continue
            fence = metadata.prepare_fence_producer_epoch()
            effects.add(self._end_transaction(transactional_id, fence.producer_id,
                                              fence.producer_epoch, False, False, now_ms,
                                              _no_reply))
        return effects

    def expire_transactional_ids(self, now_ms: int) -> Effects:
        """Ids idle for ``transactional.id.expiration.ms`` with no transaction open are
        forgotten: a tombstone each, then removed once it is written."""
        effects = Effects()
        horizon = now_ms - self.config.transactional_id_expiration_ms
        for transactional_id, metadata in list(self.txns.items()):
            partition = self.partition_for(transactional_id)
            if partition not in self.owned or partition in self.loading \
                    or metadata.pending_state is not None \
                    or not metadata.state.expiration_allowed \
                    or metadata.txn_last_update_timestamp > horizon:
                continue
            effects.add(self._write(metadata, metadata.prepare_dead(), now_ms,
                                    lambda _error, _now: Effects()))
        return effects

    # ---- describing ------------------------------------------------------------------------
    def describe_transaction(self, transactional_id: str) -> dict | KafkaError:
        """DescribeTransactions' entry for one id, or its error."""
        if not transactional_id:
            return InvalidRequestError("The transactional id must not be empty")
        try:
            metadata = self._state(transactional_id)
        except KafkaError as e:
            return e
        if metadata is None or metadata.state is S.DEAD:
            return TransactionalIdNotFoundError(
                f"Transactional id {transactional_id} is not known to its coordinator")
        return {"transactional_id": transactional_id, "state": metadata.state.state_name,
                "producer_id": metadata.producer_id,
                "producer_epoch": metadata.producer_epoch,
                "transaction_timeout_ms": metadata.txn_timeout_ms,
                "transaction_start_time_ms": metadata.txn_start_timestamp,
                "partitions": sorted(metadata.topic_partitions)}

    def list_transactions(self, producer_ids: Iterable[int] = (),
                          states: Iterable[str] = (), duration_ms: int = -1,
                          now_ms: int = 0) -> tuple[list[str], list[dict]] | KafkaError:
        """ListTransactions: (unknown state names among ``states``, the transactions
        matching every filter given); Dead ids (being expired) are never listed."""
        if self.loading:
            return CoordinatorLoadInProgressError(
                f"Broker {self.broker_id} is loading transactions")
        by_name = {s.state_name: s for s in TransactionState}
        states = list(states)
        unknown = [name for name in states if name not in by_name]
        wanted = {by_name[name] for name in states if name in by_name}
        producer_ids = set(producer_ids)
        listed = []
        for transactional_id, metadata in sorted(self.txns.items()):
            if metadata.state is S.DEAD \
                    or (producer_ids and metadata.producer_id not in producer_ids) \
                    or (states and metadata.state not in wanted) \
                    or (duration_ms >= 0
                        and now_ms - metadata.txn_start_timestamp <= duration_ms):
                continue
            listed.append({"transactional_id": transactional_id,
                           "producer_id": metadata.producer_id,
                           "state": metadata.state.state_name})
        return unknown, listed

    # ---- answering -------------------------------------------------------------------------
    @staticmethod
    def _reply_to(request: int) -> Reply:
        return lambda answer: Effects(replies=[(request, answer)])
