"""What the Ray door costs rafka's own clients on a cluster with an authorizer (issue 43).

    .venv/bin/python benchmarks/ray_door.py --records 200000

Two 3-broker clusters, one after the other, never both at once, --rounds times (the order
swapped each round; each line is the mean of the rounds, each round's figure beside it): an open one (no authorizer:
the clients call the actors and the hosts' channel directly) and a guarded one
(``authorizer.class.name`` set, a SASL_PLAINTEXT listener's PLAIN users): there the clients
sign in at the Ray door as ``alice``, a principal that is not a super user, holding only the
ACLs its jobs need (prefixed WRITE, READ and DESCRIBE on ``door-``, prefixed READ on its groups), so
that every request is checked as Kafka's KafkaApis checks it. The same calls with their
default arguments on both, on ``benchmarks/streams.py``'s realistic stream (keyed records
of 100 B-2 KiB, a tenth with headers), each line with the guarded / open ratio:

- ``send_batch`` of the stream's Arrow columns; ``send()`` record by record, then ``flush()``
  (a topic of --partitions partitions, RF --replication-factor, ``acks=all``, idempotent:
  the producer's defaults);
- ``poll_arrow(timeout_ms=1000)`` and ``poll(timeout_ms=1000)`` of a group's subscriber
  until every record is read, from its first records on (the group's join left out, as
  Kafka's ConsumerPerformance leaves it out of its fetch rate);
- control calls, median and p99 of --calls each: a consumer's ``commit()`` (the group
  coordinator's OffsetCommit), ``end_offsets`` (ListOffsets at the leaders), ``rafka.Admin``'s
  ``describe_topics`` (the door's broker hop for a read of the image).

Every figure is rafka's own clients: no Kafka client takes the Ray door.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.machine import describe  # noqa: E402
from benchmarks.spark import Progress  # noqa: E402
from benchmarks.streams import describe_stream, payload_bytes, realistic_stream  # noqa: E402

USERS = {"admin": "admin-secret", "alice": "alice-secret"}
GUARDED = {
    "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
    "sasl.enabled.mechanisms": "PLAIN",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config":
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        + " ".join(f'user_{u}="{p}"' for u, p in USERS.items()) + ";",
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:admin",
}
GROUP = "door-bench"


def sign_in(user: str) -> dict:
    return {"sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": USERS[user]}


def grant_alice(cluster) -> None:
    from protocols.kafka.acl import (Acl, AclOperation, AclPermissionType, PatternType,
                                     ResourceType)
    allow = AclPermissionType.ALLOW

    def acl(kind, name, pattern, op):
        return Acl(kind, name, pattern, "User:alice", "*", op, allow)
    acls = [acl(ResourceType.TOPIC, "door-", PatternType.PREFIXED, op)
            for op in (AclOperation.WRITE, AclOperation.READ, AclOperation.DESCRIBE)]
    acls.append(acl(ResourceType.GROUP, GROUP, PatternType.PREFIXED, AclOperation.READ))
    admin = cluster.admin(sign_in("admin"))
    assert admin.create_acls(acls) == [None] * len(acls)
    admin.close()


def timed(run) -> float:
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def latencies(call, count: int) -> tuple[float, float]:
    """Median and p99 of ``count`` calls, in ms (after one unmeasured call)."""
    call()
    taken = []
    for _ in range(count):
        started = time.perf_counter()
        call()
        taken.append((time.perf_counter() - started) * 1000)
    taken.sort()
    return statistics.median(taken), taken[min(len(taken) - 1, int(len(taken) * 0.99))]


def measure(kind: str, args, stream, root: Path) -> dict[str, float]:
    """{job: records/s, or ms for the control calls} on a fresh cluster of ``kind``."""
    import rafka
    from protocols.topics import TopicPartition

    guarded = kind == "guarded"
    cluster = rafka.Cluster.start(3, root / kind, GUARDED if guarded else None,
                                  name=f"bench-door-{kind}")
    figures: dict[str, float] = {}
    try:
        who = sign_in("alice") if guarded else {}
        if guarded:
            grant_alice(cluster)
        n, parts = len(stream), args.partitions
        admin = cluster.admin(sign_in("admin") if guarded else None)
        admin.create_topics([rafka.NewTopic(t, parts, args.replication_factor)
                             for t in ("door-arrow", "door-records")])
        admin.close()
        probe = rafka.Consumer(cluster, who)

        def end(topic):
            return lambda: sum(probe.end_offsets([TopicPartition(topic, p)
                                                  for p in range(parts)]).values())

        def send_arrow():
            with rafka.Producer(cluster, who) as producer:
                producer.send_batch("door-arrow", stream["value"], stream["key"],
                                    timestamps=stream["timestamp"],
                                    headers=stream["headers"]).result(300)
        with Progress(f"{kind} send_batch", n, end("door-arrow")):
            figures["send_batch"] = n / timed(send_arrow)

        records = [(k, v, t, h and [(x["key"], x["value"]) for x in h]) for k, v, t, h in
                   zip(stream["key"].to_pylist(), stream["value"].to_pylist(),
                       stream["timestamp"].to_pylist(), stream["headers"].to_pylist())]

        def send_each():
            with rafka.Producer(cluster, who) as producer:
                for key, value, stamp, headers in records:
                    producer.send("door-records", value, key, timestamp=stamp,
                                  headers=headers)
                producer.flush()
        with Progress(f"{kind} send", n, end("door-records")):
            figures["send"] = n / timed(send_each)
        records.clear()

        for call in ("poll_arrow", "poll"):
            consumer = rafka.Consumer(cluster, {**who, "group.id": f"{GROUP}-{call}",
                                                "auto.offset.reset": "earliest"})
            consumer.subscribe(["door-arrow"])
            got, first = [0], [0.0]

            def read():
                deadline = time.monotonic() + 300
                while got[0] < n:
                    if time.monotonic() > deadline:
                        raise SystemExit(f"{call} read {got[0]} of {n} records in 300 s")
                    polled = len(getattr(consumer, call)(timeout_ms=1000))
                    if polled and not got[0]:
                        first[0] = time.perf_counter()
                    got[0] += polled
            with Progress(f"{kind} {call}", n, lambda: got[0]):
                read()
                # From the first records on, as Kafka's ConsumerPerformance counts its fetch
                # rate: the group's join (group.initial.rebalance.delay.ms) left out.
                figures[call] = n / (time.perf_counter() - first[0])
            if call == "poll":
                figures["commit"], figures["commit p99"] = latencies(consumer.commit,
                                                                     args.calls)
            consumer.close()

        tps = [TopicPartition("door-arrow", p) for p in range(parts)]
        figures["end_offsets"], figures["end_offsets p99"] = latencies(
            lambda: probe.end_offsets(tps), args.calls)
        probe.close()
        reader = cluster.admin(who or None)
        figures["describe_topics"], figures["describe_topics p99"] = latencies(
            lambda: reader.describe_topics(["door-arrow"]), args.calls)
        reader.close()
    finally:
        cluster.shutdown()
    return figures


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=200_000)
    p.add_argument("--partitions", type=int, default=6)
    p.add_argument("--replication-factor", type=int, default=3)
    p.add_argument("--calls", type=int, default=200, help="control calls timed per line")
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()

    print(describe(), flush=True)
    stream = realistic_stream(args.records)
    mb = payload_bytes(stream) / len(stream) / 2**20
    print(describe_stream(stream), flush=True)
    print(f"3 brokers, {args.partitions} partitions, RF={args.replication_factor}; open: no "
          "authorizer; guarded: StandardAuthorizer, rafka's clients signed in at the Ray door "
          "as User:alice (PLAIN) with prefixed ACLs, not a super user", flush=True)
    rounds: dict[str, list[dict[str, float]]] = {"open": [], "guarded": []}
    for i in range(args.rounds):
        for kind in (("open", "guarded") if i % 2 == 0 else ("guarded", "open")):
            with tempfile.TemporaryDirectory(prefix="rafka-door-bench-") as tmp:
                rounds[kind].append(measure(kind, args, stream, Path(tmp)))
    open_, guarded = ({job: statistics.mean(r[job] for r in runs) for job in runs[0]}
                      for runs in (rounds["open"], rounds["guarded"]))

    def each(kind: str, job: str, unit: str) -> str:
        return ", ".join(f"{r[job]:,.{2 if unit == 'ms' else 0}f}" for r in rounds[kind])
    names = {"send_batch": "send_batch(topic, values, keys, timestamps=, headers=) of Arrow "
                           "columns, Producer defaults",
             "send": "send() record by record, then flush(), Producer defaults",
             "poll_arrow": "poll_arrow(timeout_ms=1000) of a group's subscriber until every "
                           "record is read",
             "poll": "poll(timeout_ms=1000) of a group's subscriber until every record is read"}
    for job, name in names.items():
        for kind, figures in (("open", open_), ("guarded", guarded)):
            rate = figures[job]
            ratio = (f"; guarded / open = {rate / open_[job]:.2f}x" if kind == "guarded"
                     else "")
            print(f"{kind} {name}: {args.records} records, {rate:,.0f} records/sec "
                  f"({rate * mb:.2f} MB/sec; rounds {each(kind, job, '/s')}){ratio}",
                  flush=True)
    for job in ("commit", "end_offsets", "describe_topics"):
        for kind, figures in (("open", open_), ("guarded", guarded)):
            ratio = (f"; guarded / open = {figures[job] / open_[job]:.2f}x (latency)"
                     if kind == "guarded" else "")
            print(f"{kind} {job}(): {args.calls} calls, median {figures[job]:.2f} ms "
                  f"(rounds {each(kind, job, 'ms')}), p99 {figures[job + ' p99']:.2f} ms"
                  f"{ratio}", flush=True)


if __name__ == "__main__":
    main()
