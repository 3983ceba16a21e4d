"""Kafka's listeners / advertised.listeners settings as rafka parses and advertises them."""
from __future__ import annotations

import pytest

from protocols.errors import InvalidConfigError
from protocols.kafka.listeners import (Endpoint, advertised, bootstrap_servers, parse_listeners,
                                       parse_protocol_map)


def test_listeners_parse_with_kafkas_syntax():
    assert parse_listeners("PLAINTEXT://127.0.0.1:9092") == \
        [Endpoint("PLAINTEXT", "127.0.0.1", 9092)]
    assert parse_listeners("PLAINTEXT://:0") == [Endpoint("PLAINTEXT", "", 0)]


@pytest.mark.parametrize("value", ["PLAINTEXT://127.0.0.1", "PLAINTEXT://h:99999",
                                   "KERBEROS://h:1", "PLAINTEXT://a:1,PLAINTEXT://b:2"])
def test_bad_listeners_are_invalid_config(value):
    with pytest.raises(InvalidConfigError, match="listeners"):
        parse_listeners(value)


def test_a_listener_on_every_interface_is_advertised_at_the_nodes_address():
    """On a multi-node Ray cluster 127.0.0.1 reaches only the broker's own node: a listener
    bound to every interface is advertised at the node's address (Kafka advertises the
    host's canonical name); a bound port 0 becomes the port the socket got."""
    listeners = parse_listeners("PLAINTEXT://:0")
    assert advertised(listeners, {"PLAINTEXT": 41234}, [], "10.77.0.11") == \
        [Endpoint("PLAINTEXT", "10.77.0.11", 41234)]
    fixed = parse_listeners("PLAINTEXT://127.0.0.1:9092")
    assert advertised(fixed, {"PLAINTEXT": 9092}, [], "10.77.0.11") == fixed
    configured = parse_listeners("PLAINTEXT://broker-1.example:9092", "advertised.listeners")
    assert advertised(listeners, {"PLAINTEXT": 41234}, configured, "10.77.0.11") == configured
    assert bootstrap_servers({1: [["PLAINTEXT", "b", 2]], 0: [["PLAINTEXT", "a", 1]]}) == \
        "a:1,b:2"


def test_listener_names_map_to_security_protocols():
    """listener.security.protocol.map: a listener's name is the map's key (by default each
    security protocol's own name), so a broker may have two SSL listeners."""
    assert parse_listeners("SSL://:9093") == [Endpoint("SSL", "", 9093, "SSL")]
    mapping = parse_protocol_map("INTERNAL:PLAINTEXT, EXTERNAL:SSL")
    assert parse_listeners("INTERNAL://127.0.0.1:0,EXTERNAL://:9093", protocol_map=mapping) == [
        Endpoint("INTERNAL", "127.0.0.1", 0, "PLAINTEXT"), Endpoint("EXTERNAL", "", 9093, "SSL")]
    with pytest.raises(InvalidConfigError, match="no security protocol defined for listener "
                                                 "CLIENT"):
        parse_listeners("CLIENT://:0")
    assert parse_listeners("SASL_SSL://:0") == [Endpoint("SASL_SSL", "", 0, "SASL_SSL")]
    for bad in ("INTERNAL", "INTERNAL:TLS", "A:SSL,A:PLAINTEXT"):
        with pytest.raises(InvalidConfigError, match="listener.security.protocol.map"):
            parse_protocol_map(bad)


def test_listeners_open_to_other_machines_without_tls_or_sasl_are_named():
    """A broker warns at start about each: anyone who reaches one can delete every topic."""
    from protocols.kafka.listeners import exposed
    mapping = parse_protocol_map("A:PLAINTEXT,B:PLAINTEXT,C:PLAINTEXT,D:PLAINTEXT,E:SSL,"
                                 "F:SASL_PLAINTEXT")
    listeners = parse_listeners("A://127.0.0.1:0,B://[::1]:0,C://localhost:0,D://:0,"
                                "E://:0,F://10.0.0.5:0", protocol_map=mapping)
    assert [e.name for e in exposed(listeners)] == ["D"]
    assert [e.name for e in exposed(parse_listeners("PLAINTEXT://10.0.0.5:9092"))] == \
        ["PLAINTEXT"]
