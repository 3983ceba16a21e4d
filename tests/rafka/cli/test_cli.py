"""The ``rafka`` command line: ``rafka dump-log`` as a user runs it."""
from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from protocols.records import Record, encode_batch
from rafka.cli.main import SUBCOMMANDS, build_parser, main

REPO = Path(__file__).resolve().parents[3]
SEGMENT = "00000000000000000000"
T0 = 1531477349287
# Seed 000 §3.3's index as its kafka-dump-log.sh output lists it (see tests/storage/test_dump.py).
SEED_INDEX = b"".join(struct.pack(">II", o, p) for o, p in
                      [(6, 156), (14, 459), (22, 656), (26, 838), (31, 1050)])


def rafka(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rafka", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})


@pytest.fixture
def segment(tmp_path) -> Path:
    (tmp_path / f"{SEGMENT}.log").write_bytes(encode_batch(
        [Record(b"k", f"message_{i}".encode(), T0 + i) for i in range(2)]))
    (tmp_path / f"{SEGMENT}.index").write_bytes(SEED_INDEX)
    return tmp_path


def test_dump_log_with_kafkas_files_option(segment):
    result = rafka("dump-log", "--files", f"{SEGMENT}.index,{SEGMENT}.log", "--print-data-log",
                   cwd=segment)

    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[:7] == [f"Dumping {SEGMENT}.index", "offset: 6 position: 156",
                         "offset: 14 position: 459", "offset: 22 position: 656",
                         "offset: 26 position: 838", "offset: 31 position: 1050",
                         f"Dumping {SEGMENT}.log"]
    assert lines[7] == "Log starting offset: 0"
    assert lines[8].startswith("baseOffset: 0 lastOffset: 1 count: 2 ")
    assert lines[8].endswith(" isvalid: true")
    assert lines[9] == (f"| offset: 0 CreateTime: {T0} keySize: 1 valueSize: 9 sequence: -1 "
                        "headerKeys: [] key: k payload: message_0")
    # The index's entries point past this small log: Kafka's mismatch report, on stderr.
    assert result.stderr.startswith(f"Mismatches in :{segment / (SEGMENT + '.index')}\n")


def test_dump_log_with_positional_files_and_short_data_flag(segment):
    result = rafka("dump-log", f"{SEGMENT}.log", "-d", cwd=segment)

    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1].endswith("key: k payload: message_1")
    assert result.stderr == ""


def test_missing_file_is_a_clear_error_and_a_failing_exit(segment):
    result = rafka("dump-log", "nope/00000000000000000042.log", f"{SEGMENT}.log", cwd=segment)

    assert result.returncode == 1
    assert result.stderr == "Error: nope/00000000000000000042.log: No such file or directory\n"
    # The other file is still dumped.
    assert result.stdout.splitlines()[:3] == ["Dumping nope/00000000000000000042.log",
                                              f"Dumping {SEGMENT}.log", "Log starting offset: 0"]


def test_unknown_files_are_ignored_like_kafka(segment):
    (segment / "leader-epoch-checkpoint").write_text("0\n1\n0 0\n")

    result = rafka("dump-log", "--files", "leader-epoch-checkpoint", cwd=segment)

    assert result.returncode == 0
    assert result.stdout == "Dumping leader-epoch-checkpoint\n"
    assert result.stderr == "Ignoring unknown file leader-epoch-checkpoint\n"


def test_usage_errors_exit_2(segment, capsys):
    assert main(["dump-log"]) == 2
    assert "no files given" in capsys.readouterr().err

    with pytest.raises(SystemExit) as exited:
        main(["dump-log", "--max-message-size", "0", "x.log"])
    assert exited.value.code == 2

    assert main([]) == 2
    assert "dump-log" in capsys.readouterr().err


def test_in_process_dump_and_stream_separation(segment, capsys, monkeypatch):
    monkeypatch.chdir(segment)

    status = main(["dump-log", "--verify-index-only", f"{SEGMENT}.index"])

    captured = capsys.readouterr()
    assert status == 0  # mismatches are reported, not failures (as in Kafka)
    assert captured.out == f"Dumping {SEGMENT}.index\n"
    assert captured.err.splitlines()[0] == f"Mismatches in :{segment / (SEGMENT + '.index')}"


def test_subcommands_are_a_registry():
    names = {c.name for c in SUBCOMMANDS}
    assert "dump-log" in names
    help_text = build_parser().format_help()
    assert all(name in help_text for name in names)
