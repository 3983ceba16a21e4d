"""``rafka transactions``: kafka-transactions.sh for a rafka cluster, with its commands,
options, column names and messages.

    rafka transactions list [--duration-filter MS]
    rafka transactions describe --transactional-id ID
    rafka transactions describe-producers --topic T --partition P
    rafka transactions abort --topic T --partition P --start-offset OFFSET
    rafka transactions abort --topic T --partition P --producer-id ID --producer-epoch E
                             --coordinator-epoch C
    rafka transactions find-hanging --topic T [--partition P] [--max-transaction-timeout MIN]
"""
from __future__ import annotations

import argparse
import sys
import time

from rafka.cli.args import EXIT_FAILURE, add_cluster_options, connect_cluster


def configure(parser: argparse.ArgumentParser) -> None:
    add_cluster_options(parser)
    sub = parser.add_subparsers(dest="txn_command", metavar="COMMAND", required=True)
    sub.add_parser("list", help="list transactions").add_argument(
        "--duration-filter", type=int, default=-1, metavar="MS",
        help="Duration (in millis) to filter by: if < 0, all transactions will be returned; "
             "otherwise, only transactions running longer than this duration will be "
             "returned")
    describe = sub.add_parser("describe", help="describe the state of an active "
                                               "transactional-id")
    describe.add_argument("--transactional-id", required=True, help="transactional id")
    producers = sub.add_parser("describe-producers", help="describe the states of active "
                                                          "producers for a topic partition")
    producers.add_argument("--topic", required=True, help="topic name")
    producers.add_argument("--partition", type=int, required=True, help="partition number")
    abort = sub.add_parser("abort", help="abort a hanging transaction (requires "
                                         "administrative privileges)")
    abort.add_argument("--topic", required=True, help="topic name")
    abort.add_argument("--partition", type=int, required=True, help="partition number")
    abort.add_argument("--start-offset", type=int,
                       help="start offset of the transaction to abort")
    abort.add_argument("--producer-id", type=int, help="producer id")
    abort.add_argument("--producer-epoch", type=int, help="producer epoch")
    abort.add_argument("--coordinator-epoch", type=int, help="coordinator epoch")
    hanging = sub.add_parser("find-hanging", help="find hanging transactions")
    hanging.add_argument("--topic", required=True,
                         help="topic name to limit search to")
    hanging.add_argument("--partition", type=int, help="partition number")
    hanging.add_argument("--max-transaction-timeout", type=int, default=15, metavar="MIN",
                         help="maximum transaction timeout in minutes to limit the scope "
                              "of the search (15 minutes by default)")


def pretty_print_table(headers: list[str], rows: list[list], out=None) -> None:
    """Kafka's ToolsUtils.prettyPrintTable, byte for byte: each cell padded to its column's
    widest, then a tab."""
    out = out or sys.stdout
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows)]
    for row in [headers, *rows]:
        out.write("".join(str(x).ljust(w) + "\t" for x, w in zip(row, widths)) + "\n")


def _error(message: str, cause: BaseException | None = None) -> int:
    print(f"{message}" + (f": {cause}" if cause is not None else ""), file=sys.stderr)
    return EXIT_FAILURE


def run(args: argparse.Namespace) -> int:
    from protocols.errors import KafkaError
    cluster = connect_cluster(args)
    admin = cluster.admin()
    command = args.txn_command
    if command == "list":
        try:
            listed = admin.list_transactions(duration_filter_ms=args.duration_filter)
        except KafkaError as e:
            return _error("Failed to list transactions", e)
        pretty_print_table(["TransactionalId", "Coordinator", "ProducerId", "TransactionState"],
                           [[t.transactional_id, t.coordinator_id, t.producer_id, t.state]
                            for t in listed])
        return 0
    if command == "describe":
        tid = args.transactional_id
        try:
            d = admin.describe_transactions([tid])[tid]
        except KafkaError as e:
            return _error(f"Failed to describe transaction state of transactional-id `{tid}`",
                          e)
        start = "None" if d.transaction_start_time_ms is None else d.transaction_start_time_ms
        duration = "None" if d.transaction_start_time_ms is None else \
            time.time_ns() // 1_000_000 - d.transaction_start_time_ms
        pretty_print_table(
            ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch",
             "TransactionState", "TransactionTimeoutMs", "CurrentTransactionStartTimeMs",
             "TransactionDurationMs", "TopicPartitions"],
            [[d.coordinator_id, tid, d.producer_id, d.producer_epoch, d.state,
              d.transaction_timeout_ms, start, duration,
              ",".join(f"{tp.topic}-{tp.partition}" for tp in d.topic_partitions)]])
        return 0
    if command == "describe-producers":
        tp = (args.topic, args.partition)
        try:
            producers = admin.describe_producers([tp])
        except KafkaError as e:
            return _error(f"Failed to describe producers for partition {tp[0]}-{tp[1]} on "
                          "leader", e)
        pretty_print_table(
            ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence",
             "LastTimestamp", "CurrentTransactionStartOffset"],
            [[p.producer_id, p.producer_epoch, p.coordinator_epoch, p.last_sequence,
              p.last_timestamp, "None" if p.current_transaction_start_offset is None
              else p.current_transaction_start_offset]
             for producers_of in producers.values() for p in producers_of])
        return 0
    if command == "abort":
        return _abort(admin, args)
    return _find_hanging(admin, args)


def _abort(admin, args: argparse.Namespace) -> int:
    from protocols.errors import KafkaError
    name = f"{args.topic}-{args.partition}"
    if args.start_offset is None and args.producer_id is None:
        return _error("The transaction to abort must be identified either with "
                      "--start-offset (for brokers on 3.0 or above) or with --producer-id, "
                      "--producer-epoch, and --coordinator-epoch (for older brokers)")
    if args.start_offset is None:
        if args.producer_epoch is None:
            return _error("Missing required argument --producer-epoch")
        if args.coordinator_epoch is None:
            return _error("Missing required argument --coordinator-epoch")
        spec = (args.producer_id, args.producer_epoch, max(0, args.coordinator_epoch))
    else:
        try:
            producers = admin.describe_producers([(args.topic, args.partition)])
        except KafkaError as e:
            return _error(f"Failed to validate producer state for partition {name}", e)
        found = [p for ps in producers.values() for p in ps
                 if p.current_transaction_start_offset == args.start_offset]
        if not found:
            return _error(f"Could not find any open transactions starting at offset "
                          f"{args.start_offset} on partition {name}")
        p = found[0]
        spec = (p.producer_id, p.producer_epoch, max(0, p.coordinator_epoch))
    try:
        admin.abort_transaction(args.topic, args.partition, *spec)
    except KafkaError as e:
        return _error(f"Failed to abort transaction AbortTransactionSpec(topicPartition="
                      f"{name}, producerId={spec[0]}, producerEpoch={spec[1]}, "
                      f"coordinatorEpoch={spec[2]})", e)
    return 0


def _find_hanging(admin, args: argparse.Namespace) -> int:
    """Kafka's find-hanging: open transactions older than the longest transaction
    timeout whose coordinator does not list the partition in the producer's transaction
    (so it will never write the marker)."""
    from protocols.errors import KafkaError
    if args.partition is not None:
        partitions = [(args.topic, args.partition)]
    else:
        partitions = [(args.topic, p.partition)
                      for p in admin.describe_topics([args.topic])[args.topic].partitions]
    now = time.time_ns() // 1_000_000
    max_timeout_ms = args.max_transaction_timeout * 60_000
    candidates = [(tp, p) for tp, ps in admin.describe_producers(partitions).items()
                  for p in ps if p.current_transaction_start_offset is not None
                  and now - p.last_timestamp >= max_timeout_ms]
    by_producer = {t.producer_id: t.transactional_id for t in admin.list_transactions(
        producer_ids={p.producer_id for _, p in candidates})} if candidates else {}
    hanging = []
    for tp, p in candidates:
        tid = by_producer.get(p.producer_id)
        if tid is not None:
            try:
                d = admin.describe_transactions([tid])[tid]
            except KafkaError:
                d = None
            if d is not None and tp in d.topic_partitions:
                continue       # its coordinator will still write the marker
        hanging.append([tp.topic, tp.partition, p.producer_id, p.producer_epoch,
                        p.coordinator_epoch, p.current_transaction_start_offset,
                        p.last_timestamp, (now - p.last_timestamp) // 60_000])
    pretty_print_table(["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch",
                        "StartOffset", "LastTimestamp", "Duration(min)"], hanging)
    return 0
