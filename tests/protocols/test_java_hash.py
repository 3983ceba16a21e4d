"""Java's String.hashCode and Kafka's coordinator partition (Utils.abs(hashCode) % n)."""
from protocols.java_hash import coordinator_partition_for, java_string_hash, java_string_hashcode


def test_the_coordinator_partition_is_kafkas_abs_hashcode_mod_partitions():
    assert java_string_hashcode("") == 0
    assert java_string_hashcode("hello") == 99162322                # Java's value
    assert java_string_hashcode("Aa") == java_string_hashcode("BB") == 2112
    assert coordinator_partition_for("hello", 50) == 99162322 % 50
    assert coordinator_partition_for("Aa", 50) == 12
    assert java_string_hashcode("polygenelubricants") == -(1 << 31)   # Integer.MIN_VALUE
    assert java_string_hash("polygenelubricants") == 1 << 31
    assert coordinator_partition_for("polygenelubricants", 50) == 0
    # UTF-16 code units: a character outside the BMP counts as its two surrogates.
    assert java_string_hashcode("\U0001F600") == 31 * 0xD83D + 0xDE00
