"""Fuzz targets: every decoder that reads bytes from outside the process.

Each target turns one random input into an outcome: ``accepted`` or ``refused: <error>``,
where a refusal must be a Kafka error (its name and code) with a message. Anything else is
a finding, raised as ``Finding``:

- a crash: any other exception escapes;
- a wrong answer: the decoder accepted bytes and answered something it was never given
  (records the CRC never covered, an offset that reads another batch, an entry not written);
- a refusal that does not name the file it refused (for files read on open).

A hang or an unbounded allocation is caught by the runner (a per-input alarm, an address
space limit).
"""
from __future__ import annotations

import random
import shutil
import struct
from pathlib import Path
from typing import Callable

from protocols.errors import KafkaError


class Finding(Exception):
    """The input made the decoder crash or answer wrongly."""


def refused(e: KafkaError) -> str:
    if not str(e):
        raise Finding(f"{type(e).__name__} refused the input without a message")
    return f"refused: {type(e).__name__}"


class Target:
    name = ""

    def one(self, rng: random.Random) -> str:
        raise NotImplementedError

    def close(self) -> None:
        pass


# ---- the Kafka wire protocol ---------------------------------------------------------------
class KafkaRequests(Target):
    """The listener's request decoder: valid frames of every served API and version,
    mutated, and random frames. A request decodes or closes the connection."""

    name = "kafka_request"

    def __init__(self, workdir: Path):
        from actors.broker.listener.api_versions import SUPPORTED
        from tests.kafka_wire import request_bytes
        self.supported = SUPPORTED
        self.valid = [request_bytes(key, version, {"topics": [{"name": "t"}]},
                                    client_id="fuzz")[4:]
                      for key, (lo, hi) in sorted(SUPPORTED.items())
                      for version in range(lo, hi + 1)]

    def one(self, rng: random.Random) -> str:
        from protocols.kafka.codec import CloseConnection, parse_request
        from tests.fuzz.mutate import mutate
        if rng.random() < 0.2:
            key = rng.choice(sorted(self.supported) + [rng.randrange(-5, 100)])
            frame = struct.pack(">hhi", key, rng.randrange(-2, 20), 1) + rng.randbytes(
                rng.randint(0, 64))
        else:
            frame = mutate(rng, rng.choice(self.valid))
        try:
            parse_request(frame, self.supported)
            return "accepted"
        except CloseConnection:
            return "refused: CloseConnection"


class SaslExchanges(Target):
    """A SASL listener's Authenticator (``actors.broker.listener.sasl_authenticator``) fed a
    connection's first frames: PLAIN and SCRAM exchanges (SaslHandshake v0 with bare tokens,
    v1 with SaslAuthenticate) as clients send them, mutated, reordered, random. Each frame
    is answered, or the connection closed with a Kafka error or a CloseConnection. A wrong
    answer: a session for anyone but alice with her password (PLAIN) or carol with hers
    (SCRAM), or for a user whose secret the frames never carried."""

    name = "sasl_exchange"
    PLAIN_TOKEN = b"\0alice\0alice-secret"
    SCRAM_FIRST = b"n,,n=carol,r=fuzz-nonce"

    def __init__(self, workdir: Path):
        from actors.broker.listener.api_versions import SUPPORTED
        from protocols.kafka.sasl import SaslConfig
        from protocols.kafka.scram import credential, salted_password
        from tests.kafka_wire import request_bytes
        self.supported = SUPPORTED
        salt = b"0123456789abcdef"
        carol = {m: credential(m, salted_password(m, "carol-scram", salt, 4096), salt, 4096)
                 for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")}
        self.config = SaslConfig(("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
                                 {"alice": "alice-secret", "bob": "bob-secret"},
                                 {"PLAIN": 60_000},
                                 scram=lambda user, m: carol[m] if user == "carol" else None)

        def frame(key, version, values):
            return request_bytes(key, version, values, client_id="fuzz")[4:]
        from protocols.kafka.api_keys import ApiKey
        hs, auth = ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE
        self.conversations = [
            [frame(hs, 1, {"mechanism": "PLAIN"}),
             frame(auth, 2, {"auth_bytes": self.PLAIN_TOKEN})],
            [frame(hs, 0, {"mechanism": "PLAIN"}), self.PLAIN_TOKEN],
            [frame(ApiKey.API_VERSIONS, 3, {"client_software_name": "fuzz",
                                            "client_software_version": "1"}),
             frame(hs, 1, {"mechanism": "SCRAM-SHA-256"}),
             frame(auth, 2, {"auth_bytes": self.SCRAM_FIRST}),
             frame(auth, 2, {"auth_bytes": b"c=biws,r=fuzz-nonce,p=AAAA"})],
            [frame(hs, 0, {"mechanism": "SCRAM-SHA-512"}), self.SCRAM_FIRST, b"c=biws,r=x,p=y"],
            [frame(hs, 1, {"mechanism": "PLAIN"}),
             frame(auth, 0, {"auth_bytes": self.PLAIN_TOKEN}),
             frame(ApiKey.METADATA, 12, {"topics": None})],
        ]

    def one(self, rng: random.Random) -> str:
        from actors.broker.listener.sasl_authenticator import Authenticator
        from protocols.kafka.codec import CloseConnection, parse_request
        from tests.fuzz.mutate import mutate
        frames = [bytes(f) for f in rng.choice(self.conversations)]
        for _ in range(rng.randint(1, 3)):
            i = rng.randrange(len(frames))
            frames[i] = mutate(rng, frames[i]) if rng.random() < 0.9 else \
                rng.randbytes(rng.randint(0, 80))
        if rng.random() < 0.1:
            rng.shuffle(frames)
        auth = Authenticator(self.config, lambda: 0.0)
        seen = b"".join(frames)
        try:
            for f in frames:
                if auth.complete:
                    break
                _, _, outcome = auth.receive(f, lambda x: parse_request(x, self.supported))
                if outcome is not None and outcome.close:
                    if outcome.error is None:
                        raise Finding("a connection closed without an error")
                    return refused(outcome.error)
        except CloseConnection:
            return "refused: CloseConnection"
        if auth.complete:
            who = auth.principal
            # No frame carries a valid SCRAM proof for carol: only alice, with her password.
            if who != "User:alice" or self.PLAIN_TOKEN not in seen:
                raise Finding(f"{who} signed in without a valid secret in the frames")
        return "accepted"


class TlsRequests(Target):
    """An SSL listener (a real SocketServer on 127.0.0.1, its own event loop in a thread):
    TLS handshakes mutated at their first record (the ClientHello), and requests mutated
    inside an established TLS connection, each followed by a valid ApiVersions. A request
    is answered or its connection closed; a handshake answered or closed. Findings: the
    listener hangs (no answer, no close), dies or stops serving a good client, or a handler
    fails on a request it serves (``closed_for["error"]``)."""

    name = "tls_request"

    def __init__(self, workdir: Path):
        import asyncio
        import socket
        import ssl
        import threading

        from actors.broker.config import ClusterConfig
        from actors.broker.listener.api_versions import SUPPORTED
        from actors.broker.listener.kafka_apis import KafkaApis
        from actors.broker.listener.socket_server import SocketServer
        from actors.broker.listener.tls import listener_tls
        from protocols.kafka.api_keys import ApiKey
        from protocols.kafka.listeners import parse_listeners
        from tests import tls_certs
        from tests.kafka_wire import request_bytes

        ca = tls_certs.authority()
        broker = tls_certs.issue(ca, "CN=rafka-broker,O=rafka", server=True)
        config = ClusterConfig.parse({
            "listeners": "SSL://127.0.0.1:0", "ssl.keystore.type": "PEM",
            "ssl.keystore.location": tls_certs.write(workdir / "tls-fuzz-broker.pem",
                                                     broker.key_pem() + broker.cert_pem())
        }).broker
        listeners = parse_listeners(config["listeners"])
        image = {"cluster_id": "c", "brokers": {0: {"endpoints": [["SSL", "127.0.0.1", 1]]}},
                 "topics": {}, "topic_ids": {}}

        async def no_creation(name):
            return None
        self.apis = KafkaApis(0, lambda: image, no_creation, auto_create=False)
        self.loop = asyncio.new_event_loop()
        self.server = SocketServer(0, listeners, self.apis.handle, SUPPORTED, 104_857_600,
                                   60_000, listener_tls(config, listeners))
        ready = threading.Event()

        def serve():
            asyncio.set_event_loop(self.loop)
            self.port = self.loop.run_until_complete(self.server.start())["SSL"]
            self.server.enable_request_processing()
            ready.set()
            self.loop.run_forever()
        self.thread = threading.Thread(target=serve, daemon=True, name="tls-fuzz-server")
        self.thread.start()
        ready.wait(30)
        self.context = ssl.create_default_context(cadata=ca.cert_pem().decode())
        self.context.check_hostname = False
        # The first TLS record a client sends, to mutate.
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        hello = self.context.wrap_bio(incoming, outgoing)
        try:
            hello.do_handshake()
        except ssl.SSLWantReadError:
            pass
        self.client_hello = outgoing.read()
        self.marker_values = (ApiKey.API_VERSIONS, 3, {"client_software_name": "fuzz",
                                                        "client_software_version": "1"})
        self.marker = request_bytes(*self.marker_values, correlation_id=0x7FFF_FFFF)
        self._request_bytes = request_bytes
        self.valid = [request_bytes(key, version, {"topics": [{"name": "t"}]},
                                    client_id="fuzz")[4:]
                      for key in (ApiKey.API_VERSIONS, ApiKey.METADATA)
                      for version in range(SUPPORTED[key][0], SUPPORTED[key][1] + 1)]
        self.tls: ssl.SSLSocket | None = None
        self._socket = socket

    def _connect(self):
        sock = self._socket.create_connection(("127.0.0.1", self.port), 5)
        return self.context.wrap_socket(sock)

    def _frames(self, sock, marker_id: int = 0x7FFF_FFFF):
        """Each answer frame until the marker's (``marker_id``); raises EOFError when the
        connection closes."""
        while True:
            head = self._read(sock, 8)
            size, correlation_id = struct.unpack(">ii", head)
            self._read(sock, size - 4)
            if correlation_id == marker_id:
                return

    @staticmethod
    def _read(sock, n: int) -> bytes:
        out = b""
        while len(out) < n:
            got = sock.recv(n - len(out))
            if not got:
                raise EOFError
            out += got
        return out

    def _errors(self) -> int:
        return self.server.closed_for.get("error", 0)

    def _still_serving(self) -> None:
        try:
            with self._connect() as sock:
                sock.sendall(self.marker)
                self._frames(sock)
        except (OSError, EOFError) as e:
            raise Finding(f"the listener no longer serves a good client: {e!r}") from None

    def one(self, rng: random.Random) -> str:
        import ssl

        from tests.fuzz.mutate import mutate
        if rng.random() < 0.3:        # a mutated ClientHello on a fresh connection
            with self._socket.create_connection(("127.0.0.1", self.port), 5) as raw:
                raw.sendall(mutate(rng, self.client_hello))
                # Nothing more will come: a handshake waiting for the rest of a record
                # hears the end of the stream rather than waiting out its timeout.
                raw.shutdown(self._socket.SHUT_WR)
                raw.settimeout(5)
                try:
                    answered = bool(raw.recv(4096))
                except (ConnectionResetError, self._socket.timeout):
                    answered = False
            self._still_serving()
            return "accepted" if answered else "refused: CloseConnection"
        frame = mutate(rng, rng.choice(self.valid))
        key = struct.unpack(">h", frame[:2])[0] if len(frame) >= 2 else -1
        errors = self._errors()
        if self.tls is None:
            self.tls = self._connect()
        # The marker's correlation id is one the mutated request does not carry, so that the
        # answers read are this input's.
        marker_id = rng.randrange(1, 1 << 30)
        while len(frame) >= 8 and struct.unpack(">i", frame[4:8])[0] == marker_id:
            marker_id += 1
        marker = self._request_bytes(*self.marker_values, correlation_id=marker_id)
        try:
            self.tls.sendall(struct.pack(">i", len(frame)) + frame + marker)
            self._frames(self.tls, marker_id)
            outcome = "accepted"
        except (EOFError, ConnectionResetError, ssl.SSLError, BrokenPipeError):
            self.tls.close()
            self.tls = None
            self._still_serving()
            outcome = "refused: CloseConnection"
        if self._errors() > errors and key in self.apis.handlers:
            raise Finding(f"a handler failed on a request of API key {key}")
        return outcome

    def close(self) -> None:
        if self.tls is not None:
            self.tls.close()
        import asyncio
        asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


# ---- record batches --------------------------------------------------------------------------
def _seed_batches() -> list[bytes]:
    from protocols.compression import COMPRESSION_TYPES
    from protocols.records import Record, encode_batch
    rng = random.Random(7)
    out = []
    for codec in COMPRESSION_TYPES:
        records = [Record(None if i % 3 == 0 else f"k{i}".encode(),
                          None if i % 5 == 4 else rng.randbytes(rng.randint(0, 40)) * 3,
                          1_700_000_000_000 + i, [("h", b"v")] if i % 2 else [])
                   for i in range(rng.randint(1, 12))]
        out.append(encode_batch(records, compression=codec, now_ms=1_700_000_000_000))
        out.append(encode_batch(records[:1], compression=codec, producer_id=7,
                                producer_epoch=1, base_sequence=40, base_offset=100,
                                partition_leader_epoch=3, timestamp_type="log_append_time",
                                now_ms=1_700_000_000_000))
    out.append(out[0] + out[2] + out[4])            # an append of three batches
    return out


def _fix_crcs(buf: bytearray) -> None:
    """Recompute the CRC of every batch whose header is readable, so that mutations reach
    the record decoder and the decompressors instead of stopping at the checksum."""
    import crc32c
    from protocols.records import ATTRIBUTES_OFFSET, CRC_OFFSET, LENGTH_OFFSET, LOG_OVERHEAD
    pos = 0
    while pos + ATTRIBUTES_OFFSET <= len(buf):
        (length,) = struct.unpack_from(">i", buf, pos + LENGTH_OFFSET)
        end = pos + LOG_OVERHEAD + length
        if length < ATTRIBUTES_OFFSET - LOG_OVERHEAD or end > len(buf):
            return
        struct.pack_into(">I", buf, pos + CRC_OFFSET,
                         crc32c.crc32c(bytes(buf[pos + ATTRIBUTES_OFFSET:end])))
        pos = end


class RecordBatches(Target):
    """Record batches as a client reads them (every batch checked and its records decoded,
    as rows and as columns) and as a leader validates a produce request. Half the inputs
    have their CRCs recomputed after mutation, to drive the record decoder and the four
    decompressors; in the other half, a batch that decodes must carry exactly bytes some
    seed batch had under its CRC (anything else is a wrong answer)."""

    name = "record_batch"

    def __init__(self, workdir: Path):
        from protocols.records import ATTRIBUTES_OFFSET, iter_batches
        from storage.config import LogConfig
        self.seeds = _seed_batches()
        self.covered = {bytes(b.buffer[ATTRIBUTES_OFFSET:])
                        for s in self.seeds for b in iter_batches(s)}
        self.config = LogConfig.from_props({})

    def one(self, rng: random.Random) -> str:
        from protocols.records import ATTRIBUTES_OFFSET, iter_batches
        from storage.log_validator import validate_as_leader
        from tests.fuzz.mutate import mutate
        buf = bytearray(mutate(rng, rng.choice(self.seeds)))
        crc_fixed = rng.random() < 0.5
        if crc_fixed:
            _fix_crcs(buf)
        data = bytes(buf)
        try:
            for batch in iter_batches(data):
                batch.ensure_valid()
                rows = batch.record_tuples()
                columns = batch.record_columns()
                if len(rows) != batch.record_count or len(columns[0]) != len(rows):
                    raise Finding(f"batch at {batch.position} claims {batch.record_count} "
                                  f"records, decoded {len(rows)} rows, {len(columns[0])} "
                                  f"in columns")
                headers = columns[4] or [()] * len(rows)
                if list(zip(*columns[:4], headers)) != rows:
                    raise Finding(f"batch at {batch.position}: its columns are not its rows")
                if not crc_fixed and bytes(batch.buffer[ATTRIBUTES_OFFSET:]) \
                        not in self.covered:
                    raise Finding(f"a batch at {batch.position} passed its CRC with bytes "
                                  f"no seed batch had")
            validate_as_leader(bytearray(data), self.config, "fuzz-0")
            return "accepted"
        except KafkaError as e:
            return refused(e)


class CompressedBodies(Target):
    """The four decompressors over mutated compressed bodies and decompression bombs: the
    answer is bytes within ``max_decompressed_bytes`` of the input, or CorruptRecordError."""

    name = "compressed_body"

    def __init__(self, workdir: Path):
        import cramjam
        from protocols.compression import compress
        rng = random.Random(11)
        plain = [b"", b"a", rng.randbytes(3000), b"abc" * 5000, b"\0" * 200_000]
        self.seeds = [(codec, compress(codec, p)) for codec in ("gzip", "snappy", "lz4", "zstd")
                      for p in plain]
        self.seeds.append(("snappy", bytes(cramjam.snappy.compress_raw(b"xyz" * 999))))

    def one(self, rng: random.Random) -> str:
        from protocols.compression import decompress, max_decompressed_bytes
        from tests.fuzz.mutate import mutate
        codec, body = rng.choice(self.seeds)
        if rng.random() < 0.9:
            body = mutate(rng, body)
        else:
            body = rng.randbytes(rng.randint(0, 64))
        try:
            out = decompress(codec, body)
        except KafkaError as e:
            return refused(e)
        if len(out) > max_decompressed_bytes(len(body)):
            raise Finding(f"{codec}: {len(body)} bytes decompressed to {len(out)}")
        return "accepted"


# ---- messages between actors and hosts -----------------------------------------------------
class ActorMessages(Target):
    """What crosses the replication channel and Ray between actors: the channel's frame
    header, the multi-partition fetch and produce requests and answers, and the general
    message codec (dataclasses and Kafka errors as msgpack extension types)."""

    name = "actor_message"

    def __init__(self, workdir: Path):
        from protocols import messages as m
        from protocols.errors import NotLeaderOrFollowerError
        from protocols.wire import encode
        batch = _seed_batches()[0]
        fetch = m.FetchManyRequest(1, 500, 1, 10_000_000, (
            ("t", 0, m.FetchRequest(1, 10, 2, 1_048_576)), ("u", 3, m.FetchRequest(1, 0, 0))),
            session_id=5, session_epoch=2, forgotten=(("v", 1),))
        answer = m.FetchManyResponse((
            ("t", 0, m.FetchResult(batch, 100, 0, 120, None, 2, 10)),
            ("u", 3, m.FetchResult(b"", 0, 0, 0, NotLeaderOrFollowerError("moved"), 1, 0))),
            None, 5)
        produce = m.ProduceManyRequest(-1, 30_000, (("t", 0, batch),
                                                    ("t", 1, (batch[:61], batch[61:]))))
        produced = [("t", 0, m.ProduceResult(10, -1, 0)),
                    ("t", 1, m.ProduceResult(error=NotLeaderOrFollowerError("moved")))]
        self.seeds = [
            (m.decode_fetch_many_request, m.encode_fetch_many_request(fetch)),
            (m.decode_fetch_many_response, m.encode_fetch_many_response(answer)),
            (lambda data: m.decode_fetch_many_response(bytearray(data), views=True),
             m.encode_fetch_many_response(answer)),
            (m.decode_produce_many_request, m.encode_produce_many_request(produce)),
            (m.decode_produce_many_response, m.encode_produce_many_response(produced)),
            (None, encode(fetch)), (None, encode(answer)),
            (None, encode([m.LeaderAndIsr(3, 1, "t", 0, 1, 4, 7, (1, 2), (1, 2, 3))])),
            (None, encode(NotLeaderOrFollowerError("moved"))),
        ]

    def one(self, rng: random.Random) -> str:
        from actors.replica.channel import HEADER, ChannelClosed, decode_header
        from protocols.wire import decode
        from tests.fuzz.mutate import mutate
        if rng.random() < 0.05:
            try:
                decode_header(rng.randbytes(HEADER.size))
                return "accepted"
            except ChannelClosed:
                return "refused: ChannelClosed"
        decoder, data = rng.choice(self.seeds)
        data = mutate(rng, data)
        try:
            (decoder or decode)(data)
            return "accepted"
        except KafkaError as e:
            return refused(e)


class ConsumerProtocol(Target):
    """The consumer protocol's bytes a group coordinator and a group leader read from Kafka
    clients: subscriptions (v0-v3, with owned partitions, rack) and assignments. The answer
    is the decoded value or ConsumerProtocolError (Kafka's SchemaException)."""

    name = "consumer_protocol"

    def __init__(self, workdir: Path):
        from protocols.consumer_protocol import encode_assignment, encode_subscription
        from protocols.topics import TopicPartition
        owned = [TopicPartition("t", 0), TopicPartition("u", 3)]
        self.seeds = [("subscription", encode_subscription(["t", "u"], owned)),
                      ("subscription", encode_subscription(["t"])),
                      ("assignment", encode_assignment(owned)),
                      ("assignment", encode_assignment([]))]

    def one(self, rng: random.Random) -> str:
        from protocols.consumer_protocol import (ConsumerProtocolError, decode_assignment,
                                                 decode_subscription)
        from tests.fuzz.mutate import mutate
        kind, data = rng.choice(self.seeds)
        data = mutate(rng, data)
        try:
            (decode_subscription if kind == "subscription" else decode_assignment)(data)
            return "accepted"
        except ConsumerProtocolError as e:
            if not str(e):
                raise Finding("ConsumerProtocolError without a message") from None
            return "refused: ConsumerProtocolError"


# ---- files read on open --------------------------------------------------------------------
class _FileTarget(Target):
    """A target over a directory of files: the pristine copy is made once, each input
    rewrites one file mutated and opens what reads it."""

    def __init__(self, workdir: Path):
        self.dir = workdir / self.name
        self.pristine = workdir / (self.name + ".pristine")
        for d in (self.dir, self.pristine):
            shutil.rmtree(d, ignore_errors=True)
        self.pristine.mkdir(parents=True)
        self.build(self.pristine)
        self.files = sorted(p.name for p in self.pristine.iterdir() if p.is_file())

    def build(self, directory: Path) -> None:
        raise NotImplementedError

    def fresh(self, rng: random.Random, choose: Callable[[str], bool] = lambda n: True
              ) -> tuple[str, bytes]:
        """A fresh copy of the pristine directory with one chosen file mutated."""
        shutil.rmtree(self.dir, ignore_errors=True)
        shutil.copytree(self.pristine, self.dir)
        name = rng.choice([n for n in self.files if choose(n)])
        data = mutate_file(rng, (self.pristine / name).read_bytes())
        (self.dir / name).write_bytes(data)
        return name, data

    def close(self) -> None:
        for d in (self.dir, self.pristine):
            shutil.rmtree(d, ignore_errors=True)


def mutate_file(rng: random.Random, data: bytes) -> bytes:
    from tests.fuzz.mutate import mutate
    if rng.random() < 0.05:
        return b""
    if rng.random() < 0.05:
        return rng.randbytes(rng.randint(1, 64))
    return mutate(rng, data)


def _names_file(e: Exception, directory: Path) -> bool:
    return str(directory) in str(e)


class CheckpointFiles(Target):
    """The text files a broker reads on start: ``replication-offset-checkpoint`` and its
    kin (topic partition offset), ``leader-epoch-checkpoint`` (epoch offset) and
    ``partition.metadata`` (the topic id). Entries or KafkaStorageError naming the file."""

    name = "checkpoint_file"

    def __init__(self, workdir: Path):
        from protocols.topics import TopicPartition
        from storage.checkpoint import (EpochEntry, LeaderEpochCheckpointFile,
                                        OffsetCheckpointFile)
        from storage.partition_metadata import write_topic_id
        self.dir = workdir / self.name
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True)
        offsets = OffsetCheckpointFile(self.dir / "replication-offset-checkpoint")
        offsets.write({TopicPartition("t", 0): 100, TopicPartition("my-topic.x_1", 17): 5})
        epochs = LeaderEpochCheckpointFile(self.dir / "leader-epoch-checkpoint")
        epochs.write([EpochEntry(0, 0), EpochEntry(3, 120), EpochEntry(7, 4000)])
        write_topic_id(self.dir, "AAAAAAAAAAAAAAAAAAAAAQ")
        self.files = {p.name: p.read_bytes() for p in self.dir.iterdir()}
        self.readers = {"replication-offset-checkpoint": offsets.read,
                        "leader-epoch-checkpoint": epochs.read}

    def one(self, rng: random.Random) -> str:
        from protocols.errors import KafkaStorageError
        from storage.epoch import LeaderEpochFileCache
        from storage.checkpoint import LeaderEpochCheckpointFile
        from storage.partition_metadata import read_topic_id
        name = rng.choice(sorted(self.files))
        path = self.dir / name
        path.write_bytes(mutate_file(rng, self.files[name]))
        try:
            if name == "partition.metadata":
                read_topic_id(self.dir)
            elif name == "leader-epoch-checkpoint":
                cache = LeaderEpochFileCache(LeaderEpochCheckpointFile(path))
                entries = cache.epoch_entries()
                if any(b.epoch <= a.epoch or b.start_offset <= a.start_offset or a.epoch < 0
                       for a, b in zip(entries, entries[1:])):
                    raise Finding(f"leader epoch cache loaded out of order: {entries}")
            else:
                self.readers[name]()
            return "accepted"
        except KafkaStorageError as e:
            if not _names_file(e, path):
                raise Finding(f"{type(e).__name__} does not name {path}: {e}") from None
            return refused(e)
        except UnicodeDecodeError as e:
            raise Finding(f"{name}: {e}") from None

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


class ProducerSnapshots(Target):
    """``<offset>.snapshot`` (Kafka's producer state): entries, or CorruptRecordError; an
    accepted snapshot holds exactly the entries written (its CRC covers them)."""

    name = "producer_snapshot"

    def __init__(self, workdir: Path):
        from storage.producer_state import (BatchMetadata, ProducerEntry, decode_snapshot,
                                            encode_snapshot)
        producers = []
        for pid in (1, 9, 2**40):
            entry = ProducerEntry(pid, 3)
            entry.batches.append(BatchMetadata(0, 4, 100 + pid % 7, 104 + pid % 7, 1700))
            producers.append(entry)
        self.seed = encode_snapshot(producers)
        self.entries = decode_snapshot(self.seed)

    def one(self, rng: random.Random) -> str:
        from storage.producer_state import decode_snapshot
        data = mutate_file(rng, self.seed)
        try:
            entries = decode_snapshot(data)
        except KafkaError as e:
            return refused(e)
        if entries != self.entries and data[2:6] == self.seed[2:6]:
            raise Finding(f"a snapshot passed its CRC with other entries: {entries}")
        return "accepted"


class LogOnOpen(_FileTarget):
    """A partition's whole directory opened as after a clean or an unclean shutdown, with
    one of its files mutated: a ``.log``, ``.index``, ``.timeindex``, ``.snapshot``, the
    ``leader-epoch-checkpoint``. Then every offset is read and timestamps are looked up.
    The log must answer as its pristine self would for what it still holds (recovery may
    cut a corrupt tail off), or refuse with an error naming the directory."""

    name = "log_on_open"
    CONFIG = {"segment.bytes": 1400, "index.interval.bytes": 100}

    def build(self, directory: Path) -> None:
        from protocols.records import Record, encode_batch
        from storage.log import Log
        rng = random.Random(5)
        log = Log.open(directory, self.CONFIG, clock=lambda: 1_700_000_000_000)
        sequence = 0
        for i in range(24):
            records = [Record(f"k{i}".encode(), rng.randbytes(rng.randint(1, 60)),
                              1_700_000_000_000 + 10 * i + j) for j in range(rng.randint(1, 4))]
            log.append_as_leader(encode_batch(records, producer_id=3, producer_epoch=0,
                                              base_sequence=sequence), leader_epoch=i // 8)
            sequence += len(records)
        log.roll()
        log.close()
        clean = Log.open(directory, self.CONFIG, clean_shutdown=True)
        self.leo = clean.log_end_offset
        self.truth = self._answers(clean)
        clean.close()

    def _answers(self, log) -> tuple[list, list]:
        """(the batch read at each offset, the (timestamp, offset) found for each time)."""
        from protocols.records import ATTRIBUTES_OFFSET, iter_batches
        reads = []
        for offset in range(log.log_start_offset, log.log_end_offset):
            data = log.read(offset, 1)
            first = next(iter_batches(data))
            reads.append((first.base_offset, bytes(first.buffer[ATTRIBUTES_OFFSET:])))
        times = [log.fetch_offset_by_timestamp(1_700_000_000_000 + t)
                 for t in range(-5, 250, 7)]
        return reads, times

    def _check_sequence(self, log, name: str) -> str:
        """After a .log was mutated: the batches read one after another from the start hold
        a prefix of the pristine batches' CRC-covered bytes. Their offsets may differ:
        a batch's baseOffset and partitionLeaderEpoch lie outside its CRC in Kafka's
        format, so a change there is not detectable but by breaking the segments' order."""
        from protocols.records import ATTRIBUTES_OFFSET, iter_batches
        pristine = [covered for _, covered in dict.fromkeys(self.truth[0])]
        offset, seen = log.log_start_offset, []
        while offset < log.log_end_offset:
            first = next(iter_batches(log.read(offset, 1)), None)
            if first is None:
                raise Finding(f"{name} mutated: offset {offset} reads nothing below the "
                              f"log end {log.log_end_offset}")
            first.ensure_valid()
            seen.append(bytes(first.buffer[ATTRIBUTES_OFFSET:]))
            if first.last_offset < offset:
                raise Finding(f"{name} mutated: reading offset {offset} does not advance")
            offset = first.last_offset + 1
        if seen != pristine[:len(seen)]:
            raise Finding(f"{name} mutated: the log serves {len(seen)} batches, not a prefix "
                          f"of the pristine {len(pristine)}")
        return "accepted" if len(seen) == len(pristine) else "recovered a prefix"

    def one(self, rng: random.Random) -> str:
        from protocols.errors import KafkaStorageError
        from protocols.records import ATTRIBUTES_OFFSET, iter_batches
        from storage.log import Log
        name, _ = self.fresh(rng)
        # A .log below the recovery point (all of it after a clean shutdown) is not read
        # again on open, in Kafka as here: its batches' CRCs are checked by their readers.
        # Mutated .log files are therefore opened as after a crash, from offset 0.
        clean = not name.endswith(".log") and rng.random() < 0.5
        try:
            log = Log.open(self.dir, self.CONFIG, clean_shutdown=clean,
                           recovery_point=0 if name.endswith(".log") else
                           rng.choice((0, self.leo // 2)))
        except KafkaStorageError as e:
            if not _names_file(e, self.dir):
                raise Finding(f"{type(e).__name__} does not name the file: {e}") from None
            return refused(e)
        try:
            if name.endswith(".log"):
                return self._check_sequence(log, name)
            reads, times = self.truth
            held = log.log_end_offset - log.log_start_offset
            if log.log_start_offset != 0 or held > len(reads):
                raise Finding(f"after {name} was mutated the log holds offsets "
                              f"{log.log_start_offset}..{log.log_end_offset}, pristine 0.."
                              f"{self.leo}")
            for offset in range(log.log_start_offset, log.log_end_offset):
                data = log.read(offset, 1)
                first = next(iter_batches(data), None)
                if first is None:
                    raise Finding(f"{name} mutated: offset {offset} reads nothing")
                first.ensure_valid()
                got = (first.base_offset, bytes(first.buffer[ATTRIBUTES_OFFSET:]))
                if got != reads[offset]:
                    raise Finding(f"{name} mutated ({'clean' if clean else 'unclean'} "
                                  f"shutdown): offset {offset} reads the batch at "
                                  f"{got[0]}, pristine {reads[offset][0]}")
            if held == len(reads):
                found = [log.fetch_offset_by_timestamp(1_700_000_000_000 + t)
                         for t in range(-5, 250, 7)]
                if found != times:
                    raise Finding(f"{name} mutated: offsets for times {found}, "
                                  f"pristine {times}")
            return "accepted" if held == len(reads) else "recovered a prefix"
        except KafkaError as e:
            if not _names_file(e, self.dir):
                raise Finding(f"{name} mutated: {type(e).__name__} does not name the file: "
                              f"{e}") from None
            return refused(e)
        finally:
            log.close()


TARGETS: dict[str, type[Target]] = {t.name: t for t in (
    KafkaRequests, SaslExchanges, TlsRequests, RecordBatches, CompressedBodies, ActorMessages,
    ConsumerProtocol,
    CheckpointFiles,
    ProducerSnapshots, LogOnOpen)}
