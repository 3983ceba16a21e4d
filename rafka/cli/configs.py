"""``rafka configs``: kafka-configs.sh for a rafka cluster: users' SCRAM credentials and
topics' configs, described and altered.

    rafka configs --alter --entity-type users --entity-name alice \\
        --add-config 'SCRAM-SHA-256=[iterations=8192,password=alice-secret]'
    rafka configs --describe --entity-type users [--entity-name alice]
    rafka configs --alter --entity-type users --entity-name alice --delete-config SCRAM-SHA-512
    rafka configs --alter --entity-type topics --entity-name t --add-config retention.ms=1000
"""
from __future__ import annotations

import argparse
import re
import sys

from rafka.cli.args import EXIT_FAILURE, EXIT_USAGE, add_cluster_options, admin_of

DEFAULT_ITERATIONS = 4096   # kafka-configs.sh's, where the value names none (or -1)
# kafka-configs.sh's reading of a SCRAM value: the password is everything after password=.
SCRAM_VALUE = re.compile(r"(?:iterations=(-?[0-9]*),)?password=(.*)", re.S)


def configure(parser: argparse.ArgumentParser) -> None:
    add_cluster_options(parser, command_config=True)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--describe", action="store_true", help="show the entity's configs")
    action.add_argument("--alter", action="store_true", help="change the entity's configs")
    parser.add_argument("--entity-type", required=True, choices=["users", "topics"])
    parser.add_argument("--entity-name", help="the user or topic (--describe: all if none)")
    parser.add_argument("--add-config", default="", metavar="K=V,K=[A=B,C=D]",
                        help="configs to set, comma-separated; a user's "
                             "SCRAM-SHA-256=[iterations=N,password=P]")
    parser.add_argument("--delete-config", default="", metavar="K,K",
                        help="configs to remove, comma-separated")


def split_configs(text: str) -> dict[str, str]:
    """``a=1,SCRAM-SHA-256=[iterations=8192,password=x]`` -> {"a": "1", "SCRAM-SHA-256":
    "iterations=8192,password=x"} (commas inside brackets belong to the value, as in
    kafka-configs.sh)."""
    out = {}
    for part in re.findall(r"(?:[^,\[]|\[[^\]]*\])+", text):
        key, sep, value = part.partition("=")
        if not sep:
            raise SystemExit(f"--add-config wants KEY=VALUE, got {part!r}")
        value = value.strip()
        out[key.strip()] = value[1:-1] if value.startswith("[") and value.endswith("]") \
            else value
    return out


def parse_scram(mechanism: str, value: str) -> tuple[str, int]:
    """(password, iterations) of ``iterations=N,password=P`` or ``password=P``, as
    kafka-configs.sh reads them: the password is all after ``password=`` (commas too)."""
    m = SCRAM_VALUE.fullmatch(value)
    if m is None or not m.group(2):
        raise ValueError(f"Invalid credential config {mechanism}=[...]: expected "
                         f"{mechanism}=[iterations=N,password=P] or {mechanism}=[password=P], "
                         "the password not empty")
    return m.group(2), (int(m.group(1)) if m.group(1) not in (None, "", "-1")
                        else DEFAULT_ITERATIONS)


def _users(admin, args) -> int:
    from actors.controller.scram_credentials import TYPES
    if args.describe:
        found = admin.describe_user_scram_credentials(
            [args.entity_name] if args.entity_name else None)
        for user, infos in found.items():
            listed = ", ".join(f"{m}=iterations={i}" for m, i in infos)
            print(f"SCRAM credential configs for user-principal '{user}' are {listed}")
        return 0
    if not args.entity_name:
        print("--entity-name is required with --alter", file=sys.stderr)
        return EXIT_USAGE
    upsertions = []
    for mechanism, value in split_configs(args.add_config).items():
        if mechanism not in TYPES:
            print(f"Unknown SCRAM mechanism {mechanism} (known: {', '.join(TYPES)})",
                  file=sys.stderr)
            return EXIT_USAGE
        try:
            password, iterations = parse_scram(mechanism, value)
        except ValueError as e:
            print(e, file=sys.stderr)
            return EXIT_USAGE
        upsertions.append((args.entity_name, mechanism, password, iterations))
    deletions = [(args.entity_name, m.strip()) for m in args.delete_config.split(",")
                 if m.strip()]
    failed = {user: e for user, e in admin.alter_user_scram_credentials(
        upsertions, deletions).items() if e is not None}
    for user, error in failed.items():
        print(f"Error while altering user {user}: {error.name}: {error}", file=sys.stderr)
    if failed:
        return EXIT_FAILURE
    print(f"Completed updating config for user {args.entity_name}.")
    return 0


def _topics(admin, args) -> int:
    if args.describe:
        names = [args.entity_name] if args.entity_name else admin.list_topics()
        for name, config in admin.describe_configs(names).items():
            print(f"Dynamic configs for topic {name} are:")
            for key, value in sorted(config.items()):
                print(f"  {key}={value}")
        return 0
    if not args.entity_name:
        print("--entity-name is required with --alter", file=sys.stderr)
        return EXIT_USAGE
    changes: dict = dict(split_configs(args.add_config))
    changes.update({k.strip(): None for k in args.delete_config.split(",") if k.strip()})
    admin.alter_configs({args.entity_name: changes})
    print(f"Completed updating config for topic {args.entity_name}.")
    return 0


def run(args: argparse.Namespace) -> int:
    from protocols.errors import KafkaError
    try:
        admin = admin_of(args)
        return (_users if args.entity_type == "users" else _topics)(admin, args)
    except KafkaError as e:
        print(f"Error: {e.name}: {e}", file=sys.stderr)
        return EXIT_FAILURE
