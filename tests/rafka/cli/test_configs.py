"""``rafka configs``' reading of kafka-configs.sh's --add-config values."""
import pytest

from rafka.cli.configs import parse_scram, split_configs


def test_values_in_brackets_keep_their_commas():
    assert split_configs("SCRAM-SHA-256=[iterations=8192,password=a,b=c],retention.ms=5") == {
        "SCRAM-SHA-256": "iterations=8192,password=a,b=c", "retention.ms": "5"}


def test_the_password_is_everything_after_password_as_kafka_configs_reads_it():
    assert parse_scram("SCRAM-SHA-256", "iterations=8192,password=Tr0ub4dor,horse=x") == \
        ("Tr0ub4dor,horse=x", 8192)
    assert parse_scram("SCRAM-SHA-512", "password=p,4ss") == ("p,4ss", 4096)
    assert parse_scram("SCRAM-SHA-512", "iterations=-1,password=x") == ("x", 4096)


@pytest.mark.parametrize("value", ["password=", "iterations=8192", "iterations=x,password=p",
                                   "iterations=8192,password="])
def test_a_missing_or_empty_password_or_bad_iterations_is_refused(value):
    with pytest.raises(ValueError, match="Invalid credential config SCRAM-SHA-256"):
        parse_scram("SCRAM-SHA-256", value)
