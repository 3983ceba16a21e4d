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


def add_cluster_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cluster", default="default",
                        help="the rafka cluster's name (default: default)")
    parser.add_argument("--address", default=None,
                        help="Ray address (default: RAY_ADDRESS, else the running local one)")


def connect_cluster(args: argparse.Namespace):
    """The cluster named by --cluster / --address. A tool's stdout is its output (records,
    tables), so the Ray workers' log lines are not forwarded to it."""
    import rafka
    from rafka.ray_support import ensure_ray
    ensure_ray(args.address or "auto", log_to_driver=False)
    return rafka.Cluster.connect(args.cluster, address=args.address)


def parse_key_values(pairs: list[str], option: str) -> dict[str, str]:
    """Repeated KEY=VALUE options (``--config``, ``--producer-property``, ...) as a dict."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"{option} wants KEY=VALUE, got {pair!r}")
        out[key.strip()] = value
    return out
