"""What TLS costs on the Kafka listener: the same Kafka client (confluent-kafka) on a
PLAINTEXT and an SSL listener of one rafka cluster, then of one Apache Kafka 4.3.1 cluster,
in one run (one server after the other, never both at once); each figure the median of
``--repeats`` runs; ratios rafka / Kafka over TLS and TLS / PLAINTEXT per server.

    .venv/bin/python benchmarks/listener_tls.py --records 1000000

A CA and a broker certificate (EC P-256) are made for the run (``cryptography``); clients
trust the CA (``ssl.ca.location``). Rows (6 partitions; RF=3 topics have
min.insync.replicas=2):
- produce of uniform 100-byte key-less values, RF=1 acks=1 and RF=3 acks=all (linger.ms 5,
  batch.size 256 KiB, idempotent at acks=all): the shape Kafka's perf tools use;
- produce of ``benchmarks/streams.py``'s realistic stream (keys of 6-36 bytes, JSON values
  of 100 B-2 KiB skewed toward small, a tenth with 1-3 headers) with the client's defaults
  (acks=all), RF=3;
- consume of the RF=1 topic, one message at a time as a Python application reads.
rafka's replica hosts' own channel stays PLAINTEXT here (``security.inter.broker.protocol``,
as Kafka's inter-broker listener does in the peer); ``--inter-broker-ssl`` makes both TLS.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.kafka_peer import (KAFKA_VERSION, KafkaCluster, confluent_consume,  # noqa: E402
                                   confluent_produce, create_topic)
from benchmarks.listener import (PARTITIONS, VALUE, Figures, median,  # noqa: E402
                                 produce_realistic, realistic_records)
from benchmarks.peers import PeerUnavailable  # noqa: E402


def make_pki(root: Path) -> dict:
    from tests import tls_certs
    ca = tls_certs.authority()
    broker = tls_certs.issue(ca, "CN=rafka-broker,O=rafka", server=True)
    return {"ca.pem": tls_certs.write(root / "ca.pem", ca.cert_pem()),
            "broker.pem": tls_certs.write(root / "broker.pem",
                                          broker.key_pem() + broker.cert_pem()),
            "broker.p12": Path(tls_certs.write(root / "broker.p12",
                                               broker.pkcs12("changeit", ca)))}


def measure(server: str, listeners: dict[str, tuple[str, dict]], args, realistic: list,
            realistic_mb: float) -> Figures:
    """``listeners``: {"PLAINTEXT" or "SSL": (bootstrap servers, client settings)}."""
    out = Figures(server)
    n, r = args.records, args.repeats
    mb = n * len(VALUE) / 2**20
    for name, (bootstrap, client) in listeners.items():
        def topic(prefix: str, rf: int) -> str:
            made = f"{prefix}-{uuid.uuid4().hex[:6]}"
            create_topic(bootstrap, made, PARTITIONS, rf, client=client)
            return made

        def rate(row: str, run: Callable[[], float], count: int, megabytes: float) -> None:
            value = median([count / run() for _ in range(r)])
            out.add(f"{name} {row}", value, "rate", f" ({value * megabytes / count:.2f} MB/sec)")

        warm = topic("warm-up", 3)
        confluent_produce(bootstrap, warm, min(n, 300_000), VALUE, "all", client=client)
        rf1 = topic("tls-rf1", 1)
        rate("confluent-kafka produce RF=1 acks=1",
             lambda: confluent_produce(bootstrap, rf1, n, VALUE, "1", client=client), n, mb)
        rf3 = topic("tls-rf3", 3)
        rate("confluent-kafka produce RF=3 acks=all",
             lambda: confluent_produce(bootstrap, rf3, n, VALUE, "all", client=client), n, mb)
        keyed = topic("tls-realistic", 3)
        rate("confluent-kafka produce realistic keyed stream RF=3 (client defaults)",
             lambda: produce_realistic(bootstrap, keyed, realistic, client=client),
             len(realistic), realistic_mb)

        def consume() -> float:
            seen, elapsed = confluent_consume(bootstrap, rf1, PARTITIONS, n, client=client)
            if seen < n:
                raise PeerUnavailable(f"{server} {name}: consumed {seen} of {n} records")
            return elapsed
        rate("confluent-kafka consume (one message at a time)", consume, n, mb)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000,
                        help="records per throughput run (100-byte values)")
    parser.add_argument("--realistic-records", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=3, help="runs per row; the median")
    parser.add_argument("--inter-broker-ssl", action="store_true",
                        help="rafka's replicas' channel over TLS too")
    parser.add_argument("--skip-peer", action="store_true", help="measure rafka only")
    parser.add_argument("--rounds", type=int, default=1,
                        help="whole comparisons on fresh clusters, the first server "
                             "alternating; the ratios' medians over rounds")
    args = parser.parse_args(argv)
    realistic, realistic_mb = realistic_records(args)
    ratios: dict[str, list[float]] = {}
    for round_no in range(args.rounds):
        if args.rounds > 1:
            print(f"round {round_no + 1} of {args.rounds}", flush=True)
        ours, theirs = one_round(args, realistic, realistic_mb,
                                 kafka_first=round_no % 2 == 1)
        if theirs is None:
            return 0
        for row, (value, _) in ours.values.items():
            if row in theirs.values:
                ratio = value / theirs.values[row][0]
                ratios.setdefault(row, []).append(ratio)
                print(f"rafka / Kafka, {row}: {ratio:.2f} (higher is better)", flush=True)
        for figures in (ours, theirs):
            for row, (value, _) in figures.values.items():
                if row.startswith("SSL "):
                    plain = figures.values.get("PLAINTEXT " + row[4:])
                    if plain:
                        print(f"{figures.server} TLS / PLAINTEXT, {row[4:]}: "
                              f"{value / plain[0]:.2f}", flush=True)
    if args.rounds > 1:
        for row, values in ratios.items():
            shown = ", ".join(f"{v:.2f}" for v in values)
            print(f"rafka / Kafka over {args.rounds} rounds, {row}: median "
                  f"{median(values):.2f} ({shown})", flush=True)
    return 0


def one_round(args, realistic: list, realistic_mb: float, kafka_first: bool):
    """(rafka's figures, Kafka's figures or None when the peer cannot run)."""
    with tempfile.TemporaryDirectory(prefix="rafka-tls-bench-") as root:
        pki = make_pki(Path(root))
        tls_client = {"security.protocol": "SSL", "ssl.ca.location": pki["ca.pem"]}

        def run_rafka() -> Figures:
            import rafka
            config = {"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
                      "ssl.keystore.type": "PEM", "ssl.keystore.location": pki["broker.pem"],
                      **({"security.inter.broker.protocol": "SSL"} if args.inter_broker_ssl
                         else {})}
            cluster = rafka.Cluster.start(3, Path(root) / "data", config, name="tls-bench")
            try:
                print("rafka: 3 brokers (rafka.Cluster.start), PLAINTEXT and SSL listeners on "
                      f"loopback, replicas' channel "
                      f"{'SSL' if args.inter_broker_ssl else 'PLAINTEXT'}", flush=True)
                return measure("rafka", {
                    "PLAINTEXT": (cluster.listener_addresses("PLAINTEXT"), {}),
                    "SSL": (cluster.listener_addresses("SSL"), tls_client)},
                    args, realistic, realistic_mb)
            finally:
                cluster.shutdown()

        def run_kafka() -> Figures | None:
            try:
                with KafkaCluster(ssl_keystore=(pki["broker.p12"], "changeit")) as kafka:
                    print(f"peer: Apache Kafka {KAFKA_VERSION}, KRaft, 3 nodes on loopback "
                          "(1 GiB heaps), PLAINTEXT and SSL listeners, inter-broker PLAINTEXT",
                          flush=True)
                    return measure("Kafka", {
                        "PLAINTEXT": (kafka.bootstrap_servers, {}),
                        "SSL": (kafka.ssl_bootstrap_servers, tls_client)},
                        args, realistic, realistic_mb)
            except PeerUnavailable as e:
                print(f"peer: {e}", flush=True)
                return None

        if args.skip_peer:
            return run_rafka(), None
        if kafka_first:
            theirs = run_kafka()
            return run_rafka(), theirs
        ours = run_rafka()
        return ours, run_kafka()

if __name__ == "__main__":
    sys.exit(main())
