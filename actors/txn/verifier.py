"""TxnVerifier: a replica host asking transaction coordinators whether partitions are in
their producers' transactions before appending a transaction's first batches there
(KIP-890's verification, Kafka's AddPartitionsToTxnManager with ``verifyOnly``).

The decisions are the replica's (``PartitionReplica.start_txn_verification``: whether a
producer needs verifying, and the guard a marker voids) and the coordinator's
(``TransactionCoordinator.verify_partitions``); this module finds the coordinator (through
this host's broker's FindCoordinator) and carries the question and the answer.
"""
from __future__ import annotations

import asyncio
from typing import Any

from actors.gcs import lookup
from actors.names import broker_name
from actors.txn.coordinator import verification_error_for_produce
from protocols.errors import (CoordinatorNotAvailableError, KafkaError, NotCoordinatorError,
                              TransactionalIdAuthorizationFailedError)
from protocols.messages import ProduceManyRequest
from protocols.records import transactional_producers
from protocols.topics import TRANSACTION_KEY_TYPE, TopicPartition
from protocols.wire import decode

MAX_CACHED_IDS = 10_000


class TxnVerifier:
    def __init__(self, namespace: str, broker_id: int):
        self.namespace = namespace
        self.broker_id = broker_id
        self._coordinators: dict[int, Any] = {}   # broker id -> its txn coordinator
        self._broker: Any = None                  # this host's broker
        # Transactional id -> its coordinator, as last found (oldest dropped first).
        self._by_id: dict[str, Any] = {}

    async def verify(self, req: ProduceManyRequest, replicas: dict) -> list:
        """Per partition of the request, in order: None (no transactional records), the
        guards its transactional records carry to the append (producer id -> guard), or
        the error refusing them."""
        out: list = [None] * len(req.partitions)
        asks: dict[tuple[int, int], list[int]] = {}    # (producer id, epoch) -> indexes
        for i, (topic, partition, records) in enumerate(req.partitions):
            replica = replicas.get(TopicPartition(topic, partition))
            if replica is None:
                continue
            try:
                producers = transactional_producers(records)
            except KafkaError:
                continue                  # the append refuses the bytes, with its error
            if not producers:
                continue
            if req.transactional_id is None:
                # Kafka refuses transactional records without a transactional id to
                # authorize them by.
                out[i] = TransactionalIdAuthorizationFailedError(
                    f"Transactional records for {topic}-{partition} came without a "
                    "transactional id")
                continue
            guards = {}
            for producer_id, epoch in producers.items():
                guard = replica.start_txn_verification(producer_id)
                if guard is not None:
                    guards[producer_id] = guard
                    asks.setdefault((producer_id, epoch), []).append(i)
            out[i] = guards
        if asks:
            answers = await asyncio.gather(*[
                self._ask(req.transactional_id, producer_id, epoch,
                          [req.partitions[i][:2] for i in indexes])
                for (producer_id, epoch), indexes in asks.items()])
            for indexes, errors in zip(asks.values(), answers):
                for i, error in zip(indexes, errors):
                    if error is not None and not isinstance(out[i], KafkaError):
                        out[i] = verification_error_for_produce(error)
        return out

    async def _ask(self, transactional_id: str, producer_id: int, epoch: int,
                   partitions: list) -> list:
        """The coordinator's answer per partition (None: in the transaction)."""
        try:
            coordinator = await self._coordinator(transactional_id)
            answer = decode(await coordinator.verify_partitions.remote(
                transactional_id, producer_id, epoch, partitions))
            errors = [error for _, _, error in answer]
            if any(isinstance(e, NotCoordinatorError) for e in errors):
                self._by_id.pop(transactional_id, None)   # the id moved: found afresh
            return errors
        except Exception as e:
            self._coordinators.clear()     # found afresh next time
            self._by_id.clear()
            self._broker = None
            error = e if isinstance(e, KafkaError) else CoordinatorNotAvailableError(
                f"The transaction coordinator of {transactional_id} did not answer: {e!r}")
            return [error] * len(partitions)

    async def _coordinator(self, transactional_id: str) -> Any:
        handle = self._by_id.get(transactional_id)
        if handle is None:
            handle = await self._find(transactional_id)
            if len(self._by_id) >= MAX_CACHED_IDS:
                self._by_id.pop(next(iter(self._by_id)))
            self._by_id[transactional_id] = handle
        return handle

    async def _find(self, transactional_id: str) -> Any:
        broker = self._broker
        if broker is None:
            broker = self._broker = await lookup(broker_name(self.broker_id), self.namespace)
        if broker is None:
            raise CoordinatorNotAvailableError(f"Broker {self.broker_id} is not running")
        answer = decode(await broker.find_coordinator.remote(transactional_id,
                                                             TRANSACTION_KEY_TYPE))
        if isinstance(answer, KafkaError):
            raise answer
        handle = self._coordinators.get(answer)
        if handle is None:
            host = await lookup(broker_name(answer), self.namespace)
            if host is None:
                raise CoordinatorNotAvailableError(f"Broker {answer} is not running")
            handle = self._coordinators[answer] = await host.txn_coordinator.remote()
        return handle
