"""Apache Kafka 4.3.1's own DumpLogSegments (``kafka-dump-log.sh``, the unmodified Java
class) reads the transaction files rafka writes: a log holding transactional batches and an
ABORT marker, its ``.txnindex``, a producer snapshot with a transaction still open, and
``__transaction_state`` records, with ``--transaction-log-decoder``. rafka's own dump prints
the same lines as Kafka's for the files both know.

Kafka's jars come from Maven Central once into ``~/.cache/rafka/kafka-4.3.1``
(``benchmarks/kafka_peer.classpath``); nothing of Kafka is committed."""
from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from actors.txn.metadata import TransactionState, TxnTransitMetadata
from actors.txn.transaction_log import key_bytes, value_bytes
from protocols.records import Record, encode_batch
from protocols.topics import TopicPartition
from storage import Log
from storage.dump import DumpOptions, LogDumper

pytestmark = pytest.mark.timeout(300)
T0 = 1_700_000_000_000


@pytest.fixture(scope="module")
def kafka_lib():
    from benchmarks.kafka_peer import classpath
    from benchmarks.peers import PeerUnavailable
    try:
        return classpath()
    except PeerUnavailable as e:
        pytest.fail(f"Kafka's jars could not be fetched from Maven Central: {e}")


def kafka_dump(lib, *args: str) -> list[str]:
    java = shutil.which("java")
    assert java, "java is not on PATH (Java 17 is part of this machine's set-up)"
    result = subprocess.run([java, "-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp", f"{lib}/*",
                             "org.apache.kafka.tools.DumpLogSegments", *args],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    return [line for line in result.stdout.splitlines() if line]


def txn(pid: int, seq: int, value: bytes) -> bytes:
    return encode_batch([Record(None, value, T0)], producer_id=pid, producer_epoch=0,
                        base_sequence=seq, transactional=True, now_ms=T0)


def test_kafka_reads_a_transactional_log_its_index_and_snapshot(tmp_path, kafka_lib):
    log = Log.open(tmp_path / "t-0")
    log.append_as_leader(txn(7, 0, b"a"), 0)
    log.append_as_leader(txn(7, 1, b"b"), 0)
    log.append_end_txn_marker(7, 0, 5, False, 0, now_ms=T0)
    log.append_as_leader(txn(8, 0, b"c"), 0)                   # still open at close
    log.close()
    files = [tmp_path / "t-0" / f"{0:020d}.log", tmp_path / "t-0" / f"{0:020d}.txnindex",
             tmp_path / "t-0" / f"{4:020d}.snapshot"]
    kafka = kafka_dump(kafka_lib, "--print-data-log", "--files", ",".join(map(str, files)))
    ours = [line.text for line in LogDumper(DumpOptions(print_data_log=True)).dump(files)
            if not line.stderr]
    assert ours == kafka
    assert "version: 0 producerId: 7 firstOffset: 0 lastOffset: 2 lastStableOffset: 3" in kafka
    assert any("endTxnMarker: ABORT coordinatorEpoch: 5" in line for line in kafka)
    assert any(line.startswith("producerId: 8 ") and "currentTxnFirstOffset: OptionalLong[3]"
               in line for line in kafka)


def test_kafka_decodes_transaction_state_records(tmp_path, kafka_lib):
    log = Log.open(tmp_path / "__transaction_state-0")
    ongoing = TxnTransitMetadata(1001, -1, -1, 3, -1, 60_000, TransactionState.ONGOING,
                                 frozenset({TopicPartition("t", 0), TopicPartition("t", 1)}),
                                 1_000, 2_000)
    log.append_as_leader(encode_batch([Record(key_bytes("payments"), value_bytes(ongoing),
                                              T0)], now_ms=T0), 0)
    log.append_as_leader(encode_batch([Record(key_bytes("gone"), None, T0)], now_ms=T0), 0)
    log.close()
    lines = kafka_dump(kafka_lib, "--transaction-log-decoder", "--files",
                       str(tmp_path / "__transaction_state-0" / f"{0:020d}.log"))
    records = [re.search(r" key: (\{.*\}) payload: (.*)$", line) for line in lines
               if line.startswith("| offset:")]
    key, payload = (json.loads(records[0].group(i)) for i in (1, 2))
    assert key == {"type": "0", "data": {"transactionalId": "payments"}}
    assert payload == {"version": "0", "data": {
        "producerId": 1001, "producerEpoch": 3, "transactionTimeoutMs": 60000,
        "transactionStatus": 1, "transactionPartitions": [{"topic": "t", "partitionIds": [0, 1]}],
        "transactionLastUpdateTimestampMs": 2000, "transactionStartTimestampMs": 1000}}
    assert json.loads(records[1].group(1))["data"] == {"transactionalId": "gone"}
    assert records[1].group(2) == "<DELETE>"
