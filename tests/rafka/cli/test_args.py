"""``--command-config`` files read as Java reads properties (``rafka.cli.args``)."""
from rafka.cli.args import read_properties

# The file's own text (a raw string: every backslash here is one in the file).
CLIENT_PROPERTIES = r"""# a comment
! another

security.protocol=SASL_SSL
sasl.mechanism : SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule \
    required username="alice" \
    password="a=b";
  request.timeout.ms   30000
ends.in.escaped.backslash=C:\\
escaped\=key=tab\there\u0021
"""


def test_a_kafka_client_properties_file(tmp_path):
    path = tmp_path / "client.properties"
    path.write_text(CLIENT_PROPERTIES)
    assert read_properties(str(path)) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule '
                            'required username="alice" password="a=b";',
        "request.timeout.ms": "30000",
        "ends.in.escaped.backslash": "C:\\",
        "escaped=key": "tab\there!",
    }


def test_only_java_line_ends_end_a_line_and_the_file_is_latin_1(tmp_path):
    path = tmp_path / "client.properties"
    path.write_bytes(b"a=x\x0cy\r\nb=caf\xe9\rc=\\u00e9\n")
    assert read_properties(str(path)) == {"a": "x\x0cy", "b": "café", "c": "é"}


def test_a_malformed_unicode_escape_is_refused(tmp_path):
    import pytest
    path = tmp_path / "client.properties"
    path.write_text("a=\\u00\n")
    with pytest.raises(SystemExit, match="Malformed"):
        read_properties(str(path))
