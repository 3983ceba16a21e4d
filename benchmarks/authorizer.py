"""The authorizer's cost per partition in a request (issue 43's target: < 2 us).

Usage: .venv/bin/python benchmarks/authorizer.py [--acls 10000] [--topics 100]
       [--partitions 10] [--requests 2000]

The pure function the listener asks (``protocols.kafka.authorizer.Authorizer``, Kafka's
StandardAuthorizer semantics), over a cluster's worth of ACLs shaped like Kafka's own
AuthorizerBenchmark: ``--acls`` ACLs spread over topics (literal names and prefixes), users
and hosts, allows and a tenth denies, plus wildcard ones, and each principal's grants on the
topics its client names. Each request names ``--topics``
topics of ``--partitions`` partitions each, as a producer's or consumer's does, by one of
many principals; the check is made as the listener makes it (``AuthHelper.topic_refusal``,
once per topic a request names, the answer applying to its partitions). Lines:

- cold: every decision made afresh (the authorizer's remembered answers dropped before each
  request: the first request after an ACL change, or a principal's first);
- warm: the answers remembered for the image's life (the steady state: each principal's
  client names the same topics request after request);
- one decision, cold, per topic (the whole walk of covering ACLs).

No peer line: Kafka's AuthorizerBenchmark is a JMH benchmark outside the jars this machine
fetches.
"""
from __future__ import annotations

import argparse
import platform
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from actors.broker.listener.auth_helper import AuthHelper  # noqa: E402
from benchmarks.machine import cpu_model  # noqa: E402
from protocols.kafka.acl import (Acl, AclOperation, AclPermissionType,  # noqa: E402
                                 PatternType, ResourceType)
from protocols.kafka.codec import Request  # noqa: E402


def make_acls(count: int, topics: int, rng: random.Random) -> list:
    ops = [AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.ALL]
    acls = []
    for i in range(count):
        prefixed = rng.random() < 0.2
        name = f"topic-{rng.randrange(topics * 10)}" if not prefixed else \
            f"topic-{rng.randrange(topics)}"
        acls.append(Acl(ResourceType.TOPIC, name,
                        PatternType.PREFIXED if prefixed else PatternType.LITERAL,
                        f"User:user-{rng.randrange(200)}",
                        "*" if rng.random() < 0.8 else f"10.0.{rng.randrange(255)}.1",
                        rng.choice(ops),
                        AclPermissionType.DENY if rng.random() < 0.1
                        else AclPermissionType.ALLOW))
    acls.append(Acl(ResourceType.TOPIC, "*", PatternType.LITERAL, "User:*", "*",
                    AclOperation.DESCRIBE, AclPermissionType.ALLOW))
    return acls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--acls", type=int, default=10_000)
    parser.add_argument("--topics", type=int, default=100, help="topics per request")
    parser.add_argument("--partitions", type=int, default=10, help="partitions per topic")
    parser.add_argument("--requests", type=int, default=2000)
    args = parser.parse_args()
    rng = random.Random(43)
    # Each principal's client names its own topics request after request, as a producer
    # or a consumer does.
    workloads = {f"User:user-{u}": [f"topic-{rng.randrange(args.topics * 100)}"
                                    for _ in range(args.topics)] for u in range(200)}
    # ... and is allowed to (a literal ALLOW on each, as kafka-acls.sh --producer grants).
    from actors.controller.acls import to_stored
    acls = make_acls(args.acls, args.topics * 10, rng) + [
        Acl(ResourceType.TOPIC, t, PatternType.LITERAL, user, "*", AclOperation.WRITE,
            AclPermissionType.ALLOW) for user, topics in workloads.items() for t in topics]
    image = {"acls": [to_stored(a) for a in acls]}
    auth = AuthHelper(lambda: image, True, "User:admin")
    authorizer = auth.authorizer()
    requests = [Request(0, 9, i, "bench", None, 0, "SASL_SSL", f"User:user-{rng.randrange(200)}",
                        "10.0.0.1") for i in range(args.requests)]
    names = [workloads[r.principal] for r in requests]
    partitions = args.topics * args.partitions

    def one_request(request: Request, topics: list) -> int:
        refused = auth.topic_refusal(request, AclOperation.WRITE)
        denied = 0
        for name in topics:
            if refused(name) is not None:
                denied += args.partitions
        return denied

    print(f"# machine: {platform.node()}, {cpu_model()}, Python {platform.python_version()}")
    print(f"# {len(acls)} ACLs ({args.acls} spread at random, the rest each principal's "
          f"grants), requests of {args.topics} topics x {args.partitions} "
          f"partitions ({partitions} partitions), {args.requests} requests, 200 principals")
    for label, clear in (("cold", True), ("warm", False)):
        denied = 0
        spent = 0.0
        for request, topics in zip(requests, names):
            if clear:
                authorizer._answers.clear()
            start = time.perf_counter()
            denied += one_request(request, topics)
            spent += time.perf_counter() - start
        per_partition_us = spent / (args.requests * partitions) * 1e6
        print(f"{label}: {args.requests} requests, {per_partition_us:.3f} us per partition "
              f"(target < 2 us), {spent / args.requests * 1e3:.3f} ms per request, "
              f"{denied / (args.requests * partitions):.0%} of partitions refused")
    authorizer._answers.clear()
    start = time.perf_counter()
    checks = 0
    for request, topics in zip(requests, names):
        for name in topics:
            authorizer._answers.clear()
            authorizer.authorize(request.principal, request.host, AclOperation.WRITE,
                                 ResourceType.TOPIC, name)
            checks += 1
    spent = time.perf_counter() - start
    print(f"one decision, cold: {spent / checks * 1e6:.3f} us per topic over {checks} "
          f"decisions")


if __name__ == "__main__":
    main()
