"""Files on one node's disk: Kafka-format segments, indexes, checkpoints. No Ray here."""
from storage.config import LogConfig
from storage.log import Log, LogAppendInfo
from storage.log_manager import LogManager

__all__ = ["Log", "LogAppendInfo", "LogConfig", "LogManager"]
