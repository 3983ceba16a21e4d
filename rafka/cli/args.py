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
                        name_option: str = "--cluster") -> None:
    """--cluster (or ``name_option``, where a tool's own --cluster means something else, as
    kafka-acls.sh's), --bootstrap-server, --address."""
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


def parse_key_values(pairs: list[str], option: str) -> dict[str, str]:
    """Repeated KEY=VALUE options (``--config``, ``--producer-property``, ...) as a dict."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"{option} wants KEY=VALUE, got {pair!r}")
        out[key.strip()] = value
    return out
