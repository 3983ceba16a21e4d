"""The ``rafka`` command line (also ``python -m rafka``).

One subcommand per tool, with Kafka's option names where Kafka has the tool. A subcommand is
a ``Subcommand`` in ``SUBCOMMANDS``: its name, one line of help, a function that adds its
arguments to its parser and a function that runs it and returns the exit status. Adding a
tool is writing those two functions and appending one entry. Subcommands import what they
need inside ``run``, so a quick tool such as ``dump-log`` does not pay for importing Ray or
Spark.
"""
from __future__ import annotations

import argparse
import io
import os
import sys
from dataclasses import dataclass
from typing import Callable, Sequence

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


@dataclass(frozen=True)
class Subcommand:
    name: str
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    description: str | None = None


# ---- dump-log -----------------------------------------------------------------------------

def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {value}")
    return value


def _configure_dump_log(parser: argparse.ArgumentParser) -> None:
    from storage.dump import DEFAULT_MAX_MESSAGE_SIZE, UNLIMITED_BYTES

    parser.add_argument("paths", nargs="*", metavar="FILE",
                        help="segment files to dump: .log, .index, .timeindex")
    parser.add_argument("--files", action="append", default=[], metavar="file1,file2,...",
                        help="comma separated list of data and index log files to dump "
                             "(Kafka's spelling; may be combined with FILE arguments)")
    parser.add_argument("-d", "--print-data-log", action="store_true",
                        help="print each record's key and payload (implies --deep-iteration)")
    parser.add_argument("--deep-iteration", action="store_true",
                        help="print a line per record, not only per batch")
    parser.add_argument("--skip-record-metadata", action="store_true",
                        help="leave out offset, timestamp, sizes and headers on record lines")
    parser.add_argument("--verify-index-only", action="store_true",
                        help="check index entries against the log without printing them")
    parser.add_argument("--index-sanity-check", action="store_true",
                        help="run the broker's startup sanity check on index files and "
                             "print only its verdict")
    parser.add_argument("--max-message-size", type=_positive_int,
                        default=DEFAULT_MAX_MESSAGE_SIZE, metavar="SIZE",
                        help="size of the largest batch, when checking an offset index "
                             "(default: %(default)s)")
    parser.add_argument("--max-bytes", type=_positive_int, default=UNLIMITED_BYTES,
                        metavar="SIZE",
                        help="read at most this many bytes of each .log file "
                             "(default: %(default)s)")


def dump_log_files(args: argparse.Namespace) -> list[str]:
    files = list(args.paths)
    for listed in args.files:
        files.extend(f for f in listed.split(",") if f)
    return files


def _run_dump_log(args: argparse.Namespace) -> int:
    from storage.dump import DumpOptions, LogDumper

    files = dump_log_files(args)
    if not files:
        print("rafka dump-log: error: no files given (FILE... or --files a,b,...)",
              file=sys.stderr)
        return EXIT_USAGE
    dumper = LogDumper(DumpOptions(
        print_data_log=args.print_data_log,
        deep_iteration=args.deep_iteration,
        verify_index_only=args.verify_index_only,
        index_sanity_check=args.index_sanity_check,
        skip_record_metadata=args.skip_record_metadata,
        max_message_size=args.max_message_size,
        max_bytes=args.max_bytes,
    ))
    for line in dumper.dump(files):
        if line.stderr:
            # Keep the two streams in order on a terminal.
            sys.stdout.flush()
            print(line.text, file=sys.stderr, flush=True)
        else:
            print(line.text)
    return EXIT_FAILURE if dumper.failed else EXIT_OK


DUMP_LOG = Subcommand(
    name="dump-log",
    help="print the batches, records and index entries of segment files",
    description="Parse segment files and print their contents, like Kafka's "
                "kafka-dump-log.sh: batches and records of .log files, entries of .index "
                "and .timeindex files, with index entries checked against the log.",
    configure=_configure_dump_log,
    run=_run_dump_log,
)


# ---- demo ---------------------------------------------------------------------------------

def _configure_demo(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", default="./data",
                        help="where the brokers' log directories go (default ./data)")
    parser.add_argument("--records", type=_positive_int, default=10_000,
                        help="records to append to each partition (default 10000)")


def _run_demo(args: argparse.Namespace) -> int:
    from pathlib import Path

    from rafka.demo import run_demo
    run_demo(Path(args.data_dir), records_per_partition=args.records)
    return EXIT_OK


DEMO = Subcommand(
    name="demo",
    help="run the main job on embedded defaults (data under --data-dir)",
    configure=_configure_demo,
    run=_run_demo,
)

# ---- topics -------------------------------------------------------------------------------

def _configure_topics(parser: argparse.ArgumentParser) -> None:
    from rafka import topics_cli
    topics_cli.configure(parser)


def _run_topics(args: argparse.Namespace) -> int:
    from rafka import topics_cli
    return topics_cli.run(args)


TOPICS = Subcommand(
    "topics", "create, list, describe, alter and delete topics (kafka-topics.sh)",
    _configure_topics, _run_topics)


def _configure_consumer_groups(parser: argparse.ArgumentParser) -> None:
    from rafka import consumer_groups_cli
    consumer_groups_cli.configure(parser)


def _run_consumer_groups(args: argparse.Namespace) -> int:
    from rafka import consumer_groups_cli
    return consumer_groups_cli.run(args)


CONSUMER_GROUPS = Subcommand(
    "consumer-groups", "list, describe, reset offsets of and delete consumer groups "
    "(kafka-consumer-groups.sh)", _configure_consumer_groups, _run_consumer_groups)


def _tool(name: str, help_: str, configure: str, run: str) -> Subcommand:
    """A tool from rafka.tools, imported only when it runs (or its --help is asked for)."""
    def _configure(parser: argparse.ArgumentParser) -> None:
        from rafka import tools
        getattr(tools, configure)(parser)

    def _run(args: argparse.Namespace) -> int:
        from rafka import tools
        return getattr(tools, run)(args)
    return Subcommand(name, help_, _configure, _run)


SERVER = _tool("server", "run a rafka cluster in the foreground (server start)",
               "configure_server", "run_server")
CONSOLE_PRODUCER = _tool("console-producer", "send lines from stdin (kafka-console-producer.sh)",
                         "configure_console_producer", "run_console_producer")
CONSOLE_CONSUMER = _tool("console-consumer", "print records (kafka-console-consumer.sh)",
                         "configure_console_consumer", "run_console_consumer")
PRODUCER_PERF = _tool("producer-perf-test", "producer throughput and latency "
                      "(kafka-producer-perf-test.sh)", "configure_producer_perf",
                      "run_producer_perf")
CONSUMER_PERF = _tool("consumer-perf-test", "consumer throughput "
                      "(kafka-consumer-perf-test.sh)", "configure_consumer_perf",
                      "run_consumer_perf")

SUBCOMMANDS: list[Subcommand] = [SERVER, TOPICS, CONSUMER_GROUPS, CONSOLE_PRODUCER,
                                 CONSOLE_CONSUMER, PRODUCER_PERF, CONSUMER_PERF, DUMP_LOG,
                                 DEMO]


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
