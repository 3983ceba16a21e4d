"""What Spark's planner processes run of the ``rafka`` format before any task: each kind of
planning (a read's filters and partitions, a write's writer, its commit) runs in a Python
process of its own, started cold by pyspark's stock daemon (``spark.python.daemon.module``
does not reach them), and on the path of a Spark session's first job. Checking a reader's
or writer's options there must not import the clients (the producer's columnar encoder
brings pyarrow's and pandas' ~0.3 s)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

_PLAN = """
import sys
from pyspark.sql.types import BinaryType, StructField, StructType
from rafka.spark.source import RafkaFilteringDataSource

read = {"cluster": "c", "subscribe": "src", "kafka.max.poll.records": "10000"}
write = {"cluster": "c", "topic": "dst", "kafka.linger.ms": "20", "kafka.acks": "1"}
schema = StructType([StructField("key", BinaryType()), StructField("value", BinaryType())])
source = RafkaFilteringDataSource(read)
source.reader(source.schema())
RafkaFilteringDataSource(write).writer(schema, False)
try:
    source = RafkaFilteringDataSource({**read, "kafka.max.poll.records": "0"})
    source.reader(source.schema())
except Exception as e:
    print(type(e).__name__, e)
try:
    RafkaFilteringDataSource({**write, "kafka.acks": "2"}).writer(schema, False)
except Exception as e:
    print(type(e).__name__, e)
print(" ".join(m for m in ("ray", "pandas", "rafka.producer.producer",
                           "rafka.consumer.consumer") if m in sys.modules) or "-")
"""


def test_checking_a_readers_and_a_writers_options_imports_no_client():
    planned = subprocess.run([sys.executable, "-c", _PLAN], capture_output=True, text=True,
                             timeout=120, cwd=str(Path(__file__).parents[3]))
    assert planned.returncode == 0, planned.stderr[-2000:]
    *refused, loaded = planned.stdout.strip().splitlines()
    # Still checked: Kafka's ConfigException for a value out of its range.
    assert [line.split(" ", 1)[0] for line in refused] == ["InvalidConfigError"] * 2
    assert "max.poll.records" in refused[0] and "acks" in refused[1]
    assert loaded == "-"
