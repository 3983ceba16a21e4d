"""partition.metadata (KIP-516), after Kafka's PartitionMetadataFileTest and the stray-log
cases of LogManagerTest: the file's exact text, a malformed file named in the error, and a
directory of another topic of the same name deleted before the new topic's log opens."""
from __future__ import annotations

import pytest

from protocols.errors import KafkaStorageError
from storage.partition_metadata import (FILE_NAME, PartitionMetadataFile, claim, read_topic_id,
                                        write_topic_id)

TOPIC_ID = "e5MQlNTRRyu1jDJsUpIpPw"
OTHER_ID = "AAAAAAAAAAAAAAAAAAAAAQ"


def test_write_and_read_the_topic_id_in_kafkas_format(tmp_path):
    assert read_topic_id(tmp_path) is None
    write_topic_id(tmp_path, TOPIC_ID)
    assert (tmp_path / FILE_NAME).read_text() == f"version: 0\ntopic_id: {TOPIC_ID}\n"
    assert read_topic_id(tmp_path) == TOPIC_ID


@pytest.mark.parametrize("text", ["version: 1\ntopic_id: x\n", "version: 0\n",
                                  "topic_id " + TOPIC_ID])
def test_a_malformed_file_is_an_error_naming_it(tmp_path, text):
    (tmp_path / FILE_NAME).write_text(text)
    with pytest.raises(KafkaStorageError, match=FILE_NAME):
        read_topic_id(tmp_path)


def test_claim_records_the_id_once_and_keeps_the_log(tmp_path):
    directory = tmp_path / "t-0"
    directory.mkdir()
    (directory / "00000000000000000000.log").write_bytes(b"records")
    file = PartitionMetadataFile(directory)
    assert claim(file, TOPIC_ID) is False
    file.maybe_flush()
    again = PartitionMetadataFile(directory)
    assert claim(again, TOPIC_ID) is False
    assert not again.dirty                         # named already: nothing to write
    assert read_topic_id(directory) == TOPIC_ID
    assert (directory / "00000000000000000000.log").read_bytes() == b"records"


def test_the_id_is_written_when_flushed_not_when_recorded(tmp_path):
    """Kafka's UnifiedLog records a new log's topic id and schedules the file's flush
    ("flush-metadata-file") instead of writing it while the log opens."""
    directory = tmp_path / "t-0"
    file = PartitionMetadataFile(directory)
    assert claim(file, TOPIC_ID) is False
    assert directory.is_dir() and file.dirty
    assert read_topic_id(directory) is None
    file.maybe_flush()
    assert not file.dirty
    assert (directory / FILE_NAME).read_text() == f"version: 0\ntopic_id: {TOPIC_ID}\n"
    (directory / FILE_NAME).unlink()
    file.maybe_flush()                             # written once: a second flush is a no-op
    assert read_topic_id(directory) is None


def test_a_discarded_id_is_never_written(tmp_path):
    directory = tmp_path / "t-0"
    file = PartitionMetadataFile(directory)
    claim(file, TOPIC_ID)
    file.discard()                                 # the partition is being deleted
    file.maybe_flush()
    assert not (directory / FILE_NAME).exists()


def test_a_stray_log_of_a_deleted_topic_of_the_same_name_is_deleted(tmp_path):
    directory = tmp_path / "t-0"
    directory.mkdir()
    write_topic_id(directory, OTHER_ID)
    (directory / "00000000000000000000.log").write_bytes(b"the old topic's records")
    file = PartitionMetadataFile(directory)
    assert claim(file, TOPIC_ID) is True
    assert list(directory.iterdir()) == []
    file.maybe_flush()
    assert sorted(p.name for p in directory.iterdir()) == [FILE_NAME]
    assert read_topic_id(directory) == TOPIC_ID
    assert [p.name for p in tmp_path.iterdir()] == ["t-0"]    # the stray copy is gone too
