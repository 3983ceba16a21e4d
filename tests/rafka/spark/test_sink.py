"""The Spark sink's decisions on Arrow batches, as Spark's Kafka sink (KafkaWriter) makes them
(pure: no Spark session, no cluster)."""
from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql.types import (ArrayType, BinaryType, IntegerType, LongType, StringType,
                               StructField, StructType)

from rafka.spark.offsets import SparkSourceError
from rafka.connectors.arrow_sink import SinkError, split_rows
from rafka.spark.sink import check_schema

HEADERS = ArrayType(StructType([StructField("key", StringType()),
                                StructField("value", BinaryType())]))


def schema(**types) -> StructType:
    return StructType([StructField(name, t) for name, t in types.items()])


def test_validate_query_wants_a_value_and_a_topic_of_kafkas_types():
    check_schema(schema(value=BinaryType(), key=StringType(), topic=StringType(),
                        partition=IntegerType(), headers=HEADERS, offset=LongType()), {})
    check_schema(schema(value=StringType()), {"topic": "t"})
    with pytest.raises(SparkSourceError, match="Required attribute 'value' not found"):
        check_schema(schema(key=BinaryType()), {"topic": "t"})
    with pytest.raises(SparkSourceError, match="topic option required"):
        check_schema(schema(value=BinaryType()), {})
    with pytest.raises(SparkSourceError,
                       match="value attribute unsupported type int. value must be a"
                             r"\(n\) string or binary"):
        check_schema(schema(value=IntegerType()), {"topic": "t"})
    with pytest.raises(SparkSourceError, match="partition attribute unsupported type bigint"):
        check_schema(schema(value=BinaryType(), partition=LongType()), {"topic": "t"})
    with pytest.raises(SparkSourceError, match="topic attribute unsupported type int"):
        check_schema(schema(value=BinaryType(), topic=IntegerType()), {})
    # The option overrides the column, whatever its type.
    check_schema(schema(value=BinaryType(), topic=IntegerType()), {"topic": "t"})


def rows(split):
    return [(t, p, r.column(0).to_pylist()) for t, p, r in split]


def test_rows_split_by_topic_column_and_given_partition_keeping_their_order():
    batch = pa.RecordBatch.from_pydict({
        "value": [b"a", b"b", b"c", b"d", b"e", b"f"],
        "topic": ["x", "y", "x", "x", "y", "x"],
        "partition": pa.array([None, 1, 0, None, 1, 0], pa.int32())})
    # Runs of rows with and without a partition go out in their order: a row without one
    # may land in a partition given to a row before or after it.
    assert rows(split_rows(batch, None)) == [
        ("x", None, [b"a"]), ("x", 0, [b"c"]), ("x", None, [b"d"]), ("x", 0, [b"f"]),
        ("y", 1, [b"b", b"e"])]
    # The topic option overrides the column (Spark's Kafka sink).
    assert rows(split_rows(batch, "z")) == [
        ("z", None, [b"a"]), ("z", 1, [b"b"]), ("z", 0, [b"c"]), ("z", None, [b"d"]),
        ("z", 1, [b"e"]), ("z", 0, [b"f"])]
    many = pa.RecordBatch.from_pydict({"value": [b"a", b"b", b"c"], "topic": ["x"] * 3,
                                       "partition": pa.array([2, 0, 2], pa.int32())})
    assert rows(split_rows(many, None)) == [("x", 2, [b"a", b"c"]), ("x", 0, [b"b"])]
    # One topic, no partition given: the batch goes out whole.
    plain = pa.RecordBatch.from_pydict({"value": [b"a", b"b"], "topic": ["x", "x"]})
    assert [(t, p, r is plain) for t, p, r in split_rows(plain, None)] == [("x", None, True)]


def test_a_null_topic_without_the_option_fails_the_task():
    batch = pa.RecordBatch.from_pydict({"value": [b"a"], "topic": pa.array([None], pa.string())})
    with pytest.raises(SinkError, match="null topic present in the data"):
        list(split_rows(batch, None))
    assert rows(split_rows(batch, "t")) == [("t", None, [b"a"])]


def test_exactly_once_option_and_the_transactional_id_it_replaces():
    from rafka.spark.sink import check_producer_options, exactly_once
    assert exactly_once({}) is False
    assert exactly_once({"exactlyOnce": "TRUE"}) is True
    with pytest.raises(SparkSourceError, match="Invalid value 'yes' for option 'exactlyOnce'"):
        exactly_once({"exactlyOnce": "yes"})
    # Spark's Kafka sink takes no transactional.id either; here exactlyOnce names one per
    # task.
    with pytest.raises(SparkSourceError, match="'transactional.id' is not supported"):
        check_producer_options({"kafka.transactional.id": "mine"})
