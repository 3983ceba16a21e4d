"""What the CLI's tools share: exit codes, argument types, the options that find a running
cluster, and Kafka's repeated KEY=VALUE options."""
from __future__ import annotations

import argparse

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {value}")
    return value


def add_cluster_options(parser: argparse.ArgumentParser,
                        name_option: str = "--cluster", command_config: bool = False) -> None:
    """--cluster (or ``name_option``, where a tool's own --cluster means something else, as
    kafka-acls.sh's), --bootstrap-server, --address; with ``command_config``, Kafka's
    --command-config for tools that act as an admin client."""
    if command_config:
        parser.add_argument("--command-config", default=None, metavar="FILE",
                            help="client settings (a properties file, as Kafka's tools take): "
                                 "its SASL ones (sasl.mechanism, sasl.jaas.config) sign in "
                                 "at the cluster's Ray door")
    parser.add_argument(name_option, dest="cluster", default=None,
                        help="the rafka cluster's name (default: default, or the cluster "
                             "--bootstrap-server names)")
    parser.add_argument("--bootstrap-server", default=None, metavar="HOST:PORT[,...]",
                        help="find the cluster by one of its brokers' Kafka listeners, as "
                             "Kafka's tools do (rafka's tools reach it through Ray: run them "
                             "where --address or RAY_ADDRESS reaches its Ray cluster)")
    parser.add_argument("--address", default=None,
                        help="Ray address (default: RAY_ADDRESS, else the running local one)")


def connect_cluster(args: argparse.Namespace):
    """The cluster named by --cluster or --bootstrap-server, on the Ray cluster of
    --address. A tool's stdout is its output (records, tables), so the Ray workers' log
    lines are not forwarded to it."""
    import rafka
    from rafka.client.ray_runtime import ensure_ray
    ensure_ray(args.address or "auto", log_to_driver=False)
    return rafka.Cluster.connect(args.cluster, address=args.address,
                                 bootstrap_servers=getattr(args, "bootstrap_server", None))


def admin_of(args: argparse.Namespace):
    """A ``rafka.Admin`` of the cluster the options name, signed in with --command-config."""
    config = read_properties(args.command_config) if args.command_config else None
    return connect_cluster(args).admin(config)


def read_properties(path: str) -> dict[str, str]:
    """A Java properties file, as Kafka's tools read --command-config
    (``java.util.Properties.load`` over ISO-8859-1): ``key=value``, ``key: value`` or
    ``key value``; ``#`` and ``!`` comments; a line ending in an odd run of ``\\`` goes on
    on the next; Java's escapes (``\\t``, ``\\uXXXX``, ...)."""
    import re
    from pathlib import Path
    out: dict[str, str] = {}
    logical = ""
    try:
        text = Path(path).read_bytes().decode("latin-1")
    except OSError as e:
        raise SystemExit(f"--command-config: {e}") from None
    for raw in re.split(r"\r\n|\r|\n", text):
        line = raw.lstrip(_BLANKS)
        if not logical and (not line or line[0] in "#!"):
            continue
        if (len(line) - len(line.rstrip("\\"))) % 2 == 1:   # an odd run: not an escape
            logical += line[:-1]
            continue
        logical += line
        out.update([_property(logical, path)])
        logical = ""
    if logical:
        out.update([_property(logical, path)])
    return out


_BLANKS = " \t\f"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _property(line: str, path: str) -> tuple[str, str]:
    i = 0
    while i < len(line) and not (line[i] in "=:" or line[i] in _BLANKS):
        i += 2 if line[i] == "\\" else 1     # an escaped separator belongs to the key
    rest = line[i:].lstrip(_BLANKS)
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(_BLANKS)
    try:
        return _unescape(line[:i]), _unescape(rest)
    except ValueError as e:
        raise SystemExit(f"--command-config {path}: {e}") from None


def _unescape(text: str) -> str:
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "u":
                digits = text[i + 2:i + 6]
                if len(digits) != 4 or any(d not in "0123456789abcdefABCDEF" for d in digits):
                    raise ValueError(f"Malformed \\uxxxx encoding in {text!r}")
                out.append(chr(int(digits, 16)))
                i += 6
                continue
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def parse_key_values(pairs: list[str], option: str) -> dict[str, str]:
    """Repeated KEY=VALUE options (``--config``, ``--producer-property``, ...) as a dict."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"{option} wants KEY=VALUE, got {pair!r}")
        out[key.strip()] = value
    return out
