"""The messages actors exchange: plain dataclasses, registered with the wire codec
(``protocols.wire``) so that they cross actor boundaries as msgpack. Record data inside them
stays raw RecordBatch bytes."""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

import msgpack

from protocols.errors import KafkaError
from protocols.file_region import FileRegion
from protocols.topics import TopicPartition
from protocols.wire import decode, encode, message, refusing_malformed

# ListOffsets' timestamp sentinels (Kafka's ListOffsetsRequest): instead of a time, ask for the
# high watermark (what a consumer can read up to), the log start offset, or the offset of the
# record with the largest timestamp (KIP-734).
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3


# Kafka's IsolationLevel ids (Fetch and ListOffsets requests), by isolation.level's names.
READ_UNCOMMITTED, READ_COMMITTED = 0, 1
ISOLATION_LEVELS = {"read_uncommitted": READ_UNCOMMITTED, "read_committed": READ_COMMITTED}


# ---- replication (broker to broker) ----------------------------------------------------------
@message
@dataclass(frozen=True)
class FetchRequest:
    replica_id: int
    fetch_offset: int
    current_leader_epoch: int = -1
    max_bytes: int = 1_048_576
    min_bytes: int = 1
    max_wait_ms: int = 0
    log_start_offset: int = -1  # a follower's, so the leader knows the low watermark
    # A consumer's read_committed (1) reads up to the last stable offset, told the aborted
    # transactions in what it reads; read_uncommitted (0) up to the high watermark.
    isolation_level: int = 0


@message
@dataclass
class FetchResult:
    # The records read, or where they lie (a FileRegion: see FetchManyRequest's
    # regions_on_node); a view of the answer where a consumer decoded it with ``views``.
    records: bytes | memoryview | FileRegion = b""
    high_watermark: int = -1
    log_start_offset: int = -1
    # The leader's LEO rides along so that an out-of-range follower knows where to cut
    # (Kafka's follower asks ListOffsets(latest) for it).
    log_end_offset: int = -1
    error: KafkaError | None = None
    # Which request this answers: a follower drops answers to requests it no longer has in
    # flight (another epoch, or an offset it has since truncated past).
    leader_epoch: int = -1
    fetch_offset: int = -1
    last_stable_offset: int = -1
    # read_committed: ((producer id, first offset), ...) of the aborted transactions in the
    # records read; None otherwise (Kafka's null).
    aborted_transactions: tuple | None = None


@message
@dataclass(frozen=True)
class FetchManyRequest:
    """Kafka's FetchRequest: many partitions in one request, one wait over all of them. A
    follower host's fetcher sends it to a leader host; it is answered as soon as
    ``min_bytes`` are readable over the partitions, or after ``max_wait_ms``.

    Fetch sessions (KIP-227): ``session_epoch`` -1 (FINAL_EPOCH) with ``session_id`` 0 is a
    full fetch without a session; epoch 0 (INITIAL_EPOCH) is a full fetch asking for a new
    session (closing ``session_id`` if it names one); epoch > 0 is an incremental fetch in
    session ``session_id``: ``partitions`` names only those added or changed since the last
    request and ``forgotten`` those to drop, the others fetch on from where they were."""

    replica_id: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int  # over the whole response (replica.fetch.response.max.bytes)
    partitions: tuple  # ((topic, partition, FetchRequest), ...)
    session_id: int = 0
    session_epoch: int = -1
    forgotten: tuple = ()  # ((topic, partition), ...)
    # Which start of the follower sends it (Kafka's ReplicaState.ReplicaEpoch, KIP-903):
    # larger for every later start, so that a leader can refuse a fetch a dead one sent
    # late. -1: not told.
    replica_epoch: int = -1
    # The requester's Ray node: a host on that node answers a consumer's read with
    # FileRegions, which the requester, a broker answering a Kafka client, sends from the
    # file with sendfile. "": records as bytes.
    regions_on_node: str = ""
    # A consumer's client.id: its fetches are held to the client quotas (KIP-13). None: a
    # follower, or a broker's listener that holds its own clients to theirs.
    client_id: str | None = None


@message
@dataclass
class FetchManyResponse:
    results: tuple  # ((topic, partition, FetchResult), ...)
    # The request's own error (FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH):
    # then there are no results.
    error: KafkaError | None = None
    # The session the next incremental request names (0: none). An incremental response
    # carries only the partitions with something new: records, an error, a moved high
    # watermark or log start offset.
    session_id: int = 0
    # How long the client was throttled for being over its quota (Kafka's
    # FetchResponse.ThrottleTimeMs; its connection is muted that long).
    throttle_time_ms: int = 0


# A fetch between hosts names every partition they share in its first (full) request: its
# partitions travel as flat tuples of plain values, not one extension type each (msgpack
# calls back into Python for every extension, several times the cost of the values).
def encode_fetch_many_request(request: FetchManyRequest) -> bytes:
    return msgpack.packb(
        (request.replica_id, request.max_wait_ms, request.min_bytes, request.max_bytes,
         [(t, p, r.replica_id, r.fetch_offset, r.current_leader_epoch, r.max_bytes,
           r.min_bytes, r.max_wait_ms, r.log_start_offset, r.isolation_level)
          for t, p, r in request.partitions],
         request.session_id, request.session_epoch, request.forgotten,
         request.replica_epoch, request.regions_on_node, request.client_id),
        use_bin_type=True)


@refusing_malformed("FetchManyRequest")
def decode_fetch_many_request(data: bytes) -> FetchManyRequest:
    (replica_id, max_wait_ms, min_bytes, max_bytes, partitions, session_id, session_epoch,
     forgotten, replica_epoch, regions_on_node, client_id) = msgpack.unpackb(
        data, raw=False, use_list=False)
    if client_id is not None and not isinstance(client_id, str):
        raise TypeError("client_id must be a string")
    return FetchManyRequest(replica_id, max_wait_ms, min_bytes, max_bytes,
                            tuple((t, p, FetchRequest(*rest)) for t, p, *rest in partitions),
                            session_id, session_epoch, forgotten, replica_epoch,
                            regions_on_node, client_id)


_REGION = 3   # a FileRegion in place of a result's records (msgpack extension type)


# A produce request and a fetch answer are a msgpack head, its length before it, naming each
# partition's records by their size, then the records end to end: they are sent where they
# lie (``produce_many_request_pieces``, ``fetch_many_response_pieces``), not copied into
# msgpack's buffer first (megabytes a message; on a fresh buffer each time, page faults
# too), and read where they arrived.
_HEAD_SIZE = struct.Struct(">I")


def _head(data: bytes) -> tuple[memoryview, int, Any]:
    """``data`` as a view, where its records begin, and its head."""
    view = memoryview(data)
    if len(view) < _HEAD_SIZE.size:
        raise ValueError(f"{len(view)} bytes, short of the head's size")
    (size,) = _HEAD_SIZE.unpack_from(view)
    at = _HEAD_SIZE.size + size
    if at > len(view):
        raise ValueError(f"a head of {size} bytes in {len(view)}")
    return view, at, msgpack.unpackb(view[_HEAD_SIZE.size:at], raw=False, use_list=False)


def _records_at(view: memoryview, at: int, size) -> memoryview:
    """The ``size`` bytes of records at ``at``, which the head named."""
    if type(size) is not int or size < 0 or at + size > len(view):
        raise ValueError(f"records of {size!r} bytes at {at} of {len(view)}")
    return view[at:at + size]


def _all_read(view: memoryview, at: int) -> None:
    if at != len(view):
        raise ValueError(f"{len(view) - at} bytes after the records")


def _records_out(records: FileRegion) -> msgpack.ExtType:
    return msgpack.ExtType(_REGION, records.pack())


def _records_in(records) -> FileRegion:
    if isinstance(records, msgpack.ExtType) and records.code == _REGION:
        return FileRegion.unpack(records.data)
    raise ValueError(f"records that are neither a size nor a file region: {records!r:.80}")


def fetch_many_response_pieces(response: FetchManyResponse) -> list:
    """The answer's bytes as buffers to send one after the other: a head as a produce
    request's (``_HEAD_SIZE``, then msgpack) giving each partition's records by their size
    (or as a file region), then the records end to end, where the log read them."""
    records = [r.records for _, _, r in response.results]
    head = msgpack.packb(
        ([(t, p, _records_out(r.records) if isinstance(r.records, FileRegion)
           else len(r.records), r.high_watermark, r.log_start_offset,
           r.log_end_offset, None if r.error is None else encode(r.error), r.leader_epoch,
           r.fetch_offset, r.last_stable_offset, r.aborted_transactions)
          for t, p, r in response.results],
         None if response.error is None else encode(response.error), response.session_id,
         response.throttle_time_ms),
        use_bin_type=True)
    return [_HEAD_SIZE.pack(len(head)) + head,
            *(r for r in records if not isinstance(r, FileRegion) and len(r))]


def encode_fetch_many_response(response: FetchManyResponse) -> bytes:
    return b"".join(fetch_many_response_pieces(response))


@refusing_malformed("FetchManyResponse")
def decode_fetch_many_response(data: bytes, views: bool = False) -> FetchManyResponse:
    """``views``: each partition's records a view of ``data``, not a copy (a consumer's
    decoder reads them where they arrived)."""
    view, at, (results, error, session_id, throttle_time_ms) = _head(data)
    out = []
    for t, p, records, hw, start, leo, e, epoch, offset, lso, aborted in results:
        if type(records) is int:
            part = _records_at(view, at, records)
            records, at = part if views else bytes(part), at + records
        else:
            records = _records_in(records)
        out.append((t, p, FetchResult(records, hw, start, leo,
                                      None if e is None else decode(e), epoch, offset, lso,
                                      None if aborted is None else tuple(map(tuple, aborted)))))
    _all_read(view, at)
    return FetchManyResponse(tuple(out), None if error is None else decode(error), session_id,
                             throttle_time_ms)


@message
@dataclass(frozen=True)
class OffsetsForLeaderEpochRequest:
    """Kafka's OffsetsForLeaderEpoch for many partitions (a follower about to truncate).
    The answer is ((topic, partition, (epoch, end offset) or a KafkaError), ...)."""

    replica_id: int
    partitions: tuple  # ((topic, partition, leader epoch asked, current leader epoch), ...)


@message
@dataclass
class ProduceResult:
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    error: KafkaError | None = None


@message
@dataclass(frozen=True)
class ProduceManyRequest:
    """Kafka's ProduceRequest: a producer's ready batches for every partition it sends to on
    one replica host, one batch per partition; answered with one ``ProduceResult`` per
    partition, in order, once each is done (acks=all: each waits in its own purgatory)."""

    acks: int
    timeout_ms: int
    # ((topic, partition, records), ...); a sender's records may be a tuple of buffers (a
    # batch's header and body), sent one after the other; a decoded request's are bytes.
    partitions: tuple
    # A transactional producer's id (Kafka's ProduceRequest.transactionalId): its
    # coordinator verifies a transaction's first batch at each partition.
    transactional_id: str | None = None
    # The producer's client.id: its requests are held to the client quotas (KIP-13). None:
    # a broker's listener, which holds its own clients to theirs.
    client_id: str | None = None


def produce_many_request_pieces(request: ProduceManyRequest) -> list:
    """The request's bytes as buffers to send one after the other: the head, then each
    partition's records."""
    pieces: list = []
    sizes = []
    for topic, partition, records in request.partitions:
        parts = records if isinstance(records, (tuple, list)) else (records,)
        sizes.append((topic, partition, sum(memoryview(r).nbytes for r in parts)))
        pieces.extend(parts)
    head = msgpack.packb((request.acks, request.timeout_ms, sizes,
                          request.transactional_id, request.client_id), use_bin_type=True)
    return [_HEAD_SIZE.pack(len(head)) + head, *pieces]


def encode_produce_many_request(request: ProduceManyRequest) -> bytes:
    return b"".join(produce_many_request_pieces(request))


@refusing_malformed("ProduceManyRequest")
def decode_produce_many_request(data: bytes) -> ProduceManyRequest:
    view, at, (acks, timeout_ms, sizes, transactional_id, client_id) = _head(data)
    if transactional_id is not None and not isinstance(transactional_id, str):
        raise TypeError("transactional_id must be a string")
    if client_id is not None and not isinstance(client_id, str):
        raise TypeError("client_id must be a string")
    partitions = []
    for topic, partition, size in sizes:
        partitions.append((topic, partition, bytes(_records_at(view, at, size))))
        at += size
    _all_read(view, at)
    return ProduceManyRequest(acks, timeout_ms, tuple(partitions), transactional_id,
                              client_id)


def encode_produce_many_response(results: list, throttle_time_ms: int = 0) -> bytes:
    """``[(topic, partition, ProduceResult), ...]`` as flat tuples, and how long the
    producer was throttled for being over its quota (Kafka's ProduceResponse.ThrottleTimeMs;
    its connection is muted that long)."""
    return msgpack.packb(
        ([(t, p, r.base_offset, r.log_append_time, r.log_start_offset,
           None if r.error is None else encode(r.error)) for t, p, r in results],
         throttle_time_ms),
        use_bin_type=True)


@refusing_malformed("ProduceManyResponse")
def decode_produce_many_response(data: bytes) -> tuple[list, int]:
    """(``[(topic, partition, ProduceResult), ...]``, throttle_time_ms)."""
    results, throttle_time_ms = msgpack.unpackb(data, raw=False, use_list=False)
    return [(t, p, ProduceResult(base, append_time, start,
                                 None if error is None else decode(error)))
            for t, p, base, append_time, start, error in results], throttle_time_ms


@message
@dataclass(frozen=True)
class AlterPartition:
    """A leader's ISR proposal to the controller, fenced by leader and partition epoch."""

    topic: str
    partition: int
    leader_id: int
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[int, ...]

@message
@dataclass
class DeleteRecordsResult:
    low_watermark: int = -1
    error: KafkaError | None = None


# ---- controller to broker ---------------------------------------------------------------------
@message
@dataclass(frozen=True)
class LeaderAndIsr:
    controller_epoch: int
    broker_id: int
    topic: str
    partition: int
    leader: int
    leader_epoch: int
    partition_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    is_new: bool = False


@message
@dataclass(frozen=True)
class StopReplica:
    controller_epoch: int
    broker_id: int
    topic: str
    partition: int
    delete_partition: bool


@message
@dataclass(frozen=True)
class UpdateMetadata:
    controller_epoch: int
    broker_id: int
    image: dict = field(compare=False)


# ---- consumer groups (client to coordinator) ---------------------------------------------------
@message
@dataclass(frozen=True)
class JoinResponse:
    error: KafkaError | None
    generation_id: int = -1
    protocol_name: str | None = None
    leader_id: str = ""
    member_id: str = ""
    members: tuple[tuple[str, str | None, Any], ...] = ()   # the leader's: (id, instance, meta)


@message
@dataclass(frozen=True)
class SyncResponse:
    error: KafkaError | None
    assignment: Any = None
    protocol_name: str | None = None


@dataclass(frozen=True)
class OffsetAndMetadata:
    """A committed offset (Kafka's OffsetAndMetadata): what the coordinator stores and
    OffsetFetch answers, and what ``Consumer.commit`` takes."""
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1


def offsets_to_commit(offsets) -> dict:
    """What a commit call is given (``{(topic, partition): offset or OffsetAndMetadata}``)
    as ``{TopicPartition: OffsetAndMetadata}``."""
    return {TopicPartition(*tp): (om if isinstance(om, OffsetAndMetadata)
                                  else OffsetAndMetadata(int(om)))
            for tp, om in offsets.items()}
