"""``rafka configs``: kafka-configs.sh for a rafka cluster: client quotas (users, client
ids, ips), users' SCRAM credentials and topics' configs, described and altered.

    rafka configs --alter --entity-type users --entity-name alice \
        --add-config 'producer_byte_rate=1048576,consumer_byte_rate=2097152'
    rafka configs --alter --entity-type users --entity-name alice --entity-type clients \
        --entity-default --add-config request_percentage=50
    rafka configs --describe --entity-type clients [--entity-name app | --entity-default]

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
    # Repeatable, in the order given (a user and a client id: one quota entity), as in
    # kafka-configs.sh; --entity-default names the type's default in its place.
    parser.add_argument("--entity-type", required=True, action="append", dest="types",
                        choices=["users", "clients", "ips", "topics"])
    parser.add_argument("--entity-name", action="append", dest="names",
                        help="the user, client id, ip or topic (--describe: all if none)")
    parser.add_argument("--entity-default", action="append_const", const="", dest="names",
                        help="the entity type's default (users, clients, ips)")
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


# kafka-configs.sh's entity types -> ClientQuotaEntity's, and how it names them.
QUOTA_TYPES = {"users": "user", "clients": "client-id", "ips": "ip"}
QUOTA_NAMES = {"user": "user-principal", "client-id": "client-id", "ip": "ip"}


def describe_quota_entity(entity: tuple) -> str:
    """``user-principal 'alice', client-id 'app'``, ``the default user-principal``."""
    names = dict(entity)
    return ", ".join(f"{QUOTA_NAMES[t]} '{names[t]}'" if names[t] is not None
                     else f"the default {QUOTA_NAMES[t]}"
                     for t in ("user", "client-id", "ip") if t in names)


def _quotas(admin, args) -> int:
    """Client quotas, as kafka-configs.sh --entity-type users|clients|ips handles them; a
    user's SCRAM credentials with them."""
    from actors.controller.scram_credentials import TYPES
    from protocols.kafka.client_quotas import MATCH_DEFAULT, MATCH_EXACT, MATCH_SPECIFIED
    types, names = args.types, args.names or []
    if len(names) > len(types):
        print("More entity names specified than entity types", file=sys.stderr)
        return EXIT_USAGE
    if args.describe:
        components = [(QUOTA_TYPES[t], MATCH_SPECIFIED if i >= len(names) else
                       MATCH_DEFAULT if names[i] == "" else MATCH_EXACT,
                       names[i] if i < len(names) and names[i] else None)
                      for i, t in enumerate(types)]
        for entity, quotas in admin.describe_client_quotas(components, strict=True).items():
            listed = ", ".join(f"{k}={float(v)}" for k, v in sorted(quotas.items()))
            print(f"Quota configs for {describe_quota_entity(entity)} are {listed}")
        # SCRAM credentials: a user's, not with client ids, not the default user's.
        if types == ["users"] and "" not in names:
            return _scram(admin, args, names[0] if names else None)
        return 0
    if len(names) != len(types):
        print("Exactly one entity name must be specified for every entity type",
              file=sys.stderr)
        return EXIT_USAGE
    added = split_configs(args.add_config)
    deleted = [k.strip() for k in args.delete_config.split(",") if k.strip()]
    scram = {k: v for k, v in added.items() if k in TYPES}
    scram_deleted = [k for k in deleted if k in TYPES]
    if (scram or scram_deleted) and (types != ["users"] or names[0] == ""):
        print("SCRAM credentials are set for one user at a time (--entity-type users "
              "--entity-name USER)", file=sys.stderr)
        return EXIT_USAGE
    quotas = {k: v for k, v in added.items() if k not in TYPES}
    quota_deleted = [k for k in deleted if k not in TYPES]
    entity = {QUOTA_TYPES[t]: (n or None) for t, n in zip(types, names)}
    if quotas or quota_deleted:
        current = admin.describe_client_quotas(
            [(t, MATCH_DEFAULT if n is None else MATCH_EXACT, n) for t, n in entity.items()],
            strict=True)
        existing = next(iter(current.values()), {})
        invalid = [k for k in quota_deleted if k not in existing]
        if invalid:
            print(f"Invalid config(s): {','.join(invalid)}", file=sys.stderr)
            return EXIT_FAILURE
        values: dict = {k: None for k in quota_deleted}
        for key, value in quotas.items():
            try:
                values[key] = float(value)
            except ValueError:
                print(f"Cannot parse quota configuration value for {key}: {value}",
                      file=sys.stderr)
                return EXIT_USAGE
        [(altered, error)] = admin.alter_client_quotas([(entity, values)]).items()
        if error is not None:
            print(f"Error while altering quotas of {describe_quota_entity(altered)}: "
                  f"{error.name}: {error}", file=sys.stderr)
            return EXIT_FAILURE
    if scram or scram_deleted:
        status = _alter_scram(admin, names[0], scram, scram_deleted)
        if status:
            return status
    if names[0]:
        print(f"Completed updating config for {types[0][:-1]} {names[0]}.")
    else:
        print(f"Completed updating default config for {types[0]} in the cluster.")
    return 0


def _scram(admin, args, user: str | None) -> int:
    from protocols.errors import ResourceNotFoundError
    try:
        found = admin.describe_user_scram_credentials([user] if user else None)
    except ResourceNotFoundError:   # a user with quotas only: kafka-configs.sh says nothing
        return 0
    for name, infos in found.items():
        listed = ", ".join(f"{m}=iterations={i}" for m, i in infos)
        print(f"SCRAM credential configs for user-principal '{name}' are {listed}")
    return 0


def _alter_scram(admin, user: str, added: dict, deleted: list) -> int:
    from actors.controller.scram_credentials import TYPES
    upsertions = []
    for mechanism, value in added.items():
        if mechanism not in TYPES:
            print(f"Unknown SCRAM mechanism {mechanism} (known: {', '.join(TYPES)})",
                  file=sys.stderr)
            return EXIT_USAGE
        try:
            password, iterations = parse_scram(mechanism, value)
        except ValueError as e:
            print(e, file=sys.stderr)
            return EXIT_USAGE
        upsertions.append((user, mechanism, password, iterations))
    deletions = [(user, m) for m in deleted]
    failed = {name: e for name, e in admin.alter_user_scram_credentials(
        upsertions, deletions).items() if e is not None}
    for name, error in failed.items():
        print(f"Error while altering user {name}: {error.name}: {error}", file=sys.stderr)
    return EXIT_FAILURE if failed else 0


def _topics(admin, args) -> int:
    if args.types != ["topics"] or len(args.names or []) > 1 or "" in (args.names or []):
        print("--entity-type topics takes one --entity-name, alone", file=sys.stderr)
        return EXIT_USAGE
    args.entity_name = (args.names or [None])[0]
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
        return (_topics if "topics" in args.types else _quotas)(admin, args)
    except KafkaError as e:
        print(f"Error: {e.name}: {e}", file=sys.stderr)
        return EXIT_FAILURE
