"""``rafka consumer-groups``: kafka-consumer-groups.sh for a rafka cluster.

    rafka consumer-groups --list
    rafka consumer-groups --describe --group billing      (or --describe billing)
    rafka consumer-groups --describe --group billing --members
    rafka consumer-groups --reset-offsets --group billing --topic events --to-earliest
                          [--execute]                      (a dry run without it)
    rafka consumer-groups --delete --group billing
"""
from __future__ import annotations

import argparse
import sys
from datetime import datetime

from rafka.cli.args import add_cluster_options, connect_cluster


def configure(parser: argparse.ArgumentParser) -> None:
    add_cluster_options(parser)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--list", action="store_true", help="list the consumer groups")
    action.add_argument("--describe", nargs="?", const="", metavar="GROUP",
                        help="offsets, log end offsets and lag per partition, with the "
                             "member that owns it")
    action.add_argument("--reset-offsets", action="store_true",
                        help="set a group's committed offsets (the group must have no "
                             "active members); a dry run unless --execute")
    action.add_argument("--delete", action="store_true",
                        help="delete an empty group and its committed offsets")
    parser.add_argument("--group", help="the consumer group")
    parser.add_argument("--members", action="store_true",
                        help="with --describe: the members instead of the offsets")
    parser.add_argument("--state", action="store_true",
                        help="with --describe: the group's state and coordinator")
    parser.add_argument("--topic", action="append", default=[], metavar="TOPIC[:P,P]",
                        help="with --reset-offsets: a topic, optionally some partitions "
                             "(repeatable)")
    parser.add_argument("--all-topics", action="store_true",
                        help="with --reset-offsets: every topic the group has offsets for")
    to = parser.add_mutually_exclusive_group()
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    to.add_argument("--to-offset", type=int, metavar="OFFSET")
    to.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss",
                    help="the first offset at or after this time (local time unless an "
                         "offset such as +00:00 is given)")
    to.add_argument("--shift-by", type=int, metavar="N",
                    help="move the committed offsets by N (negative: back)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="only show the new offsets "
                                                             "(the default)")
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")


def _table(rows: list[list], header: list[str]) -> None:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    print()
    for row in [header, *rows]:
        print(" ".join(str(x).ljust(w) for x, w in zip(row, widths)).rstrip())


def _describe(admin, group: str, args) -> int:
    d = admin.describe_consumer_groups([group])[group]
    if args.state:
        _table([[group, f"{d.coordinator}", d.partition_assignor or "", d.state,
                 len(d.members)]],
               ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"])
        return 0
    if args.members:
        if not d.members:
            print(f"\nConsumer group '{group}' has no active members.")
            return 0
        _table([[group, m.member_id, m.group_instance_id or "-", m.client_id,
                 len(m.assignment)] for m in d.members],
               ["GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "CLIENT-ID", "#PARTITIONS"])
        return 0
    committed = admin.list_consumer_group_offsets(group)
    owner = {tp: m for m in d.members for tp in m.assignment}
    partitions = sorted(set(committed) | set(owner))
    if d.state == "Dead" and not committed:
        print(f"Error: Consumer group '{group}' does not exist.", file=sys.stderr)
        return 1
    if not d.members:
        print(f"\nConsumer group '{group}' has no active members.")
    ends = admin.list_offsets({tp: "latest" for tp in partitions}) if partitions else {}
    rows = []
    for tp in partitions:
        current = committed[tp].offset if tp in committed else None
        end = ends[tp].offset
        m = owner.get(tp)
        rows.append([group, tp.topic, tp.partition, "-" if current is None else current, end,
                     "-" if current is None else max(0, end - current),
                     m.member_id if m else "-", m.client_id if m else "-"])
    _table(rows, ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                  "CONSUMER-ID", "CLIENT-ID"])
    return 0


def _reset_partitions(admin, group: str, args) -> list:
    from protocols.topics import TopicPartition
    if args.all_topics:
        return sorted(admin.list_consumer_group_offsets(group))
    out = []
    for spec in args.topic:
        topic, _, parts = spec.partition(":")
        if parts:
            out += [TopicPartition(topic, int(p)) for p in parts.split(",")]
        else:
            described = admin.describe_topics([topic])[topic]
            out += [TopicPartition(topic, p.partition) for p in described.partitions]
    return out


def _reset(admin, group: str, args) -> int:
    state = admin.describe_consumer_groups([group])[group].state
    if state not in ("Empty", "Dead"):
        print(f"Error: Assignments can only be reset if the group '{group}' is inactive, but "
              f"the current state is {state}.", file=sys.stderr)
        return 1
    partitions = _reset_partitions(admin, group, args)
    if not partitions:
        print("One of the reset scopes should be defined: --all-topics, --topic.",
              file=sys.stderr)
        return 2
    if args.to_earliest:
        new = {tp: r.offset for tp, r in admin.list_offsets(
            {tp: "earliest" for tp in partitions}).items()}
    elif args.to_latest:
        new = {tp: r.offset for tp, r in admin.list_offsets(
            {tp: "latest" for tp in partitions}).items()}
    elif args.to_offset is not None:
        new = {tp: args.to_offset for tp in partitions}
    elif args.to_datetime is not None:
        ts = int(datetime.fromisoformat(args.to_datetime).timestamp() * 1000)
        found = admin.list_offsets({tp: ts for tp in partitions})
        latest = admin.list_offsets({tp: "latest" for tp in partitions})
        new = {tp: (found[tp].offset if found[tp].offset >= 0 else latest[tp].offset)
               for tp in partitions}
    elif args.shift_by is not None:
        committed = admin.list_consumer_group_offsets(group, partitions)
        new = {tp: committed[tp].offset + args.shift_by for tp in partitions
               if tp in committed}
    else:
        print("One of the reset specifications should be defined: --to-earliest, "
              "--to-latest, --to-offset, --to-datetime, --shift-by.", file=sys.stderr)
        return 2
    # Like Kafka: clamp into [log start, log end].
    starts = admin.list_offsets({tp: "earliest" for tp in new})
    ends = admin.list_offsets({tp: "latest" for tp in new})
    new = {tp: min(max(o, starts[tp].offset), ends[tp].offset) for tp, o in new.items()}
    if args.execute:
        admin.alter_consumer_group_offsets(group, new)
    else:
        print("WARN: No action will be performed as the --execute option is missing. "
              "In a future major release, the default behavior of this command will be to "
              "prompt the user before executing the reset rather than doing a dry run.",
              file=sys.stderr)
    _table([[group, tp.topic, tp.partition, o] for tp, o in sorted(new.items())],
           ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"])
    return 0


def run(args: argparse.Namespace) -> int:
    from protocols.errors import KafkaError, UnknownMemberIdError

    group = args.group or (args.describe or None)
    try:
        cluster = connect_cluster(args)
        admin = cluster.admin()
        if args.list:
            for g in admin.list_consumer_groups():
                print(g.group_id)
            return 0
        if not group:
            print("--group is required", file=sys.stderr)
            return 2
        if args.describe is not None:
            return _describe(admin, group, args)
        if args.reset_offsets:
            try:
                return _reset(admin, group, args)
            except UnknownMemberIdError:   # a member joined meanwhile
                print(f"Error: Assignments can only be reset if the group '{group}' is "
                      "inactive, but the current state is active.", file=sys.stderr)
                return 1
        if args.delete:
            admin.delete_consumer_groups([group])
            print(f"Deletion of requested consumer groups ('{group}') was successful.")
        return 0
    except KafkaError as e:
        print(f"Error: {e} ({e.name})", file=sys.stderr)
        return 1
