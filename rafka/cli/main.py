"""The ``rafka`` command line (also ``python -m rafka``).

One subcommand per tool, with Kafka's option names where Kafka has the tool. A subcommand is
a ``Subcommand`` in ``SUBCOMMANDS``: its name, one line of help, a function that adds its
arguments to its parser and a function that runs it and returns the exit status. Every tool
is a module of ``rafka.cli`` with two functions, ``configure(parser)`` and ``run(args)``,
registered with ``_lazy``: its module is imported only when it runs (or its --help is asked
for), so a quick tool such as ``dump-log`` does not pay for importing Ray or Spark. Adding a
tool is writing that module and appending one entry. Exit codes and the argument helpers
tools share are in ``rafka.cli.args``.
"""
from __future__ import annotations

import argparse
import importlib
import io
import os
import sys
from dataclasses import dataclass
from typing import Callable, Sequence

from rafka.cli.args import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_USAGE


@dataclass(frozen=True)
class Subcommand:
    name: str
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    description: str | None = None


def _lazy(name: str, help_: str, module: str, description: str | None = None) -> Subcommand:
    """A tool whose module (``rafka.cli.<module>``) is imported only when it runs (or its
    --help is asked for): its ``configure(parser)`` adds its arguments, its ``run(args)``
    runs it."""
    def _configure(parser: argparse.ArgumentParser) -> None:
        importlib.import_module(f"rafka.cli.{module}").configure(parser)

    def _run(args: argparse.Namespace) -> int:
        return importlib.import_module(f"rafka.cli.{module}").run(args)
    return Subcommand(name, help_, _configure, _run, description)


SUBCOMMANDS: list[Subcommand] = [
    _lazy("server", "run a rafka cluster in the foreground, or stop one (server start, "
          "server stop)", "server"),
    _lazy("topics", "create, list, describe, alter and delete topics (kafka-topics.sh)",
          "topics"),
    _lazy("configs", "describe and alter users' SCRAM credentials and topics' configs "
          "(kafka-configs.sh)", "configs"),
    _lazy("acls", "add, list and remove ACLs (kafka-acls.sh)", "acls"),
    _lazy("consumer-groups", "list, describe, reset offsets of and delete consumer groups "
          "(kafka-consumer-groups.sh)", "consumer_groups"),
    _lazy("transactions", "list, describe and abort transactions, find hanging ones "
          "(kafka-transactions.sh)", "transactions"),
    _lazy("top", "a live view of brokers, partitions out of ISR, leaders, throughput and the "
          "most lagging consumer groups, refreshing in place", "top"),
    _lazy("console-producer", "send lines from stdin (kafka-console-producer.sh)",
          "console_producer"),
    _lazy("console-consumer", "print records (kafka-console-consumer.sh)", "console_consumer"),
    _lazy("producer-perf-test", "producer throughput and latency "
          "(kafka-producer-perf-test.sh)", "producer_perf_test"),
    _lazy("consumer-perf-test", "consumer throughput (kafka-consumer-perf-test.sh)",
          "consumer_perf_test"),
    _lazy("dump-log", "print the batches, records and index entries of segment files",
          "dump_log",
          description="Parse segment files and print their contents, like Kafka's "
                      "kafka-dump-log.sh: batches and records of .log files, entries "
                      "of .index and .timeindex files, with index entries checked "
                      "against the log."),
    _lazy("demo", "run the main job on embedded defaults (data under --data-dir)", "demo"),
]


# ---- entry point --------------------------------------------------------------------------

def build_parser(subcommands: Sequence[Subcommand] | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rafka",
        description="rafka: a Kafka-style partitioned, replicated commit log on Ray.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in (SUBCOMMANDS if subcommands is None else subcommands):
        command_parser = sub.add_parser(command.name, help=command.help,
                                        description=command.description or command.help)
        command.configure(command_parser)
        command_parser.set_defaults(run=command.run)
    return parser


_RAY_PRINT = "ray.experimental.tqdm_ray"


class _ToolStdout(io.TextIOBase):
    """A tool's stdout carries its output alone (records, tables, perf lines): what Ray's
    own code prints there (raylet notices and worker logs forwarded to the driver, from its
    listener threads and at exit) goes to stderr instead."""

    def __init__(self, out):
        self._out = out

    def write(self, text: str) -> int:
        frame = sys._getframe(1)
        # A connected Ray driver replaces print with tqdm_ray's safe_print: look past it.
        while frame is not None and frame.f_globals.get("__name__") == _RAY_PRINT:
            frame = frame.f_back
        caller = frame.f_globals.get("__name__", "") if frame is not None else ""
        if caller == "ray" or caller.startswith("ray."):
            return sys.stderr.write(text)
        return self._out.write(text)

    def flush(self) -> None:
        self._out.flush()

    def fileno(self) -> int:
        return self._out.fileno()

    def isatty(self) -> bool:
        return self._out.isatty()

    @property
    def encoding(self) -> str:
        return self._out.encoding


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "run", None) is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    # Left in place after main returns: Ray prints its last lines at interpreter exit.
    if not isinstance(sys.stdout, _ToolStdout):
        sys.stdout = _ToolStdout(sys.stdout)
    try:
        return args.run(args)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader (``| head``) went away: stop quietly, and keep Python from failing
        # again while flushing stdout at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_FAILURE


if __name__ == "__main__":
    raise SystemExit(main())
