"""``rafka top``: a terminal view of a cluster, refreshing in place: its brokers (up or down,
the partitions each leads and holds, how many of its replicas are out of ISR, messages in
per second to the partitions it leads), its topics by throughput, the partitions out of ISR
and the most lagging consumer groups (``rafka.cli.top_view`` decides every figure).

    rafka top [--cluster NAME | --bootstrap-server HOST:PORT] [--interval 2]
              [--iterations N] [--no-groups]

Messages per second are the log end offsets' growth between two refreshes (so the first
screen shows "-"); lag is each group's committed offsets against the log end, as
``rafka consumer-groups --describe`` tells it. On a terminal each refresh redraws the
screen; otherwise (a pipe, a file) each is printed after the last, under a blank line.
"""
from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime

from rafka.cli.args import add_cluster_options, admin_of, positive_int
from rafka.cli.top_view import PartitionState, Sample, render

CLEAR = "\x1b[H\x1b[2J"


def configure(parser: argparse.ArgumentParser) -> None:
    add_cluster_options(parser, command_config=True)
    parser.add_argument("--interval", type=_seconds, default=2.0, metavar="SECONDS",
                        help="seconds between refreshes (default 2)")
    parser.add_argument("--iterations", type=positive_int, default=None, metavar="N",
                        help="stop after N screens (default: until interrupted)")
    parser.add_argument("--no-groups", action="store_true",
                        help="leave out consumer groups' lag (one request per group and "
                             "its partitions' leaders each refresh)")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text}")
    return value


def _describe_topics(admin) -> dict:
    """Every topic this principal may describe (one deleted meanwhile, or refused, is left
    out)."""
    names = admin.list_topics()
    try:
        return admin.describe_topics(names)
    except Exception:   # noqa: BLE001 - one of them: ask one by one
        found = {}
        for name in names:
            try:
                found.update(admin.describe_topics([name]))
            except Exception:   # noqa: BLE001
                continue
        return found


def sample(admin, groups: bool) -> Sample:
    cluster = admin.describe_cluster()
    topics = _describe_topics(admin)
    partitions = {(name, p.partition): PartitionState(p.leader, tuple(p.replicas),
                                                       tuple(p.isr))
                  for name, d in topics.items() for p in d.partitions}
    live = set(cluster.brokers)
    # A partition without a live leader answers no offsets: left out of the rates.
    served = [tp for tp, s in partitions.items() if s.leader in live]
    try:
        ends = admin.list_offsets({tp: "latest" for tp in served}) if served else {}
    except Exception:   # noqa: BLE001 - a leader moving or gone: no rates this time
        ends = {}
    out = Sample(time.monotonic(), cluster.brokers, cluster.controller_id, partitions,
                 {(tp.topic, tp.partition): r.offset for tp, r in ends.items()})
    if groups:
        for listing in admin.list_consumer_groups():
            if listing.protocol_type not in ("consumer", ""):
                continue
            try:
                lags = admin.consumer_group_lag(listing.group_id)
            except Exception:   # noqa: BLE001 - its coordinator moving, its offsets' leaders
                out.groups[listing.group_id] = (listing.state, None)
                continue
            out.groups[listing.group_id] = (listing.state, {
                (tp.topic, tp.partition): lag.lag for tp, lag in lags.items()})
    return out


def run(args: argparse.Namespace) -> int:
    admin = admin_of(args)
    name = args.cluster or "default"
    redraw = sys.stdout.isatty()
    previous = None
    shown = 0
    while True:
        now = sample(admin, not args.no_groups)
        title = (f"rafka top - cluster {name} - {datetime.now():%Y-%m-%d %H:%M:%S} "
                 f"(every {args.interval:g} s{', Ctrl-C to stop' if redraw else ''})")
        text = "\n".join(render(now, previous, title))
        if redraw:
            sys.stdout.write(CLEAR + text + "\n")
        else:
            sys.stdout.write(("\n" if shown else "") + text + "\n")
        sys.stdout.flush()
        shown += 1
        if args.iterations is not None and shown >= args.iterations:
            return 0
        previous = now
        time.sleep(max(0.0, args.interval - (time.monotonic() - now.at_s)))
