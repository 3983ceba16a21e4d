"""``rafka dump-log``: kafka-dump-log.sh for rafka's segment files (no cluster needed)."""
from __future__ import annotations

import argparse
import sys

from rafka.cli.args import EXIT_FAILURE, EXIT_OK, EXIT_USAGE, positive_int


def configure(parser: argparse.ArgumentParser) -> None:
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
    parser.add_argument("--max-message-size", type=positive_int,
                        default=DEFAULT_MAX_MESSAGE_SIZE, metavar="SIZE",
                        help="size of the largest batch, when checking an offset index "
                             "(default: %(default)s)")
    parser.add_argument("--max-bytes", type=positive_int, default=UNLIMITED_BYTES,
                        metavar="SIZE",
                        help="read at most this many bytes of each .log file "
                             "(default: %(default)s)")


def dump_log_files(args: argparse.Namespace) -> list[str]:
    files = list(args.paths)
    for listed in args.files:
        files.extend(f for f in listed.split(",") if f)
    return files


def run(args: argparse.Namespace) -> int:
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
