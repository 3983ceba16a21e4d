"""Serializers and deserializers by Kafka's class names or as Python callables."""
from __future__ import annotations

from typing import Any, Callable

from protocols.errors import InvalidConfigError


def _utf8(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode("utf-8")


def _bytes(value: Any) -> bytes:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    raise TypeError(f"Cannot send a {type(value).__name__} without a serializer: pass bytes, "
                    "str, or set key.serializer / value.serializer")


SERIALIZERS: dict[str, Callable[[Any], bytes]] = {
    "org.apache.kafka.common.serialization.StringSerializer": _utf8,
    "org.apache.kafka.common.serialization.ByteArraySerializer": _bytes,
    "string": _utf8, "bytes": _bytes,
}
DESERIALIZERS: dict[str, Callable[[bytes], Any]] = {
    "org.apache.kafka.common.serialization.StringDeserializer": lambda b: b.decode("utf-8"),
    "org.apache.kafka.common.serialization.ByteArrayDeserializer": lambda b: b,
    "string": lambda b: b.decode("utf-8"), "bytes": lambda b: b,
}


def resolve(value: Any, table: dict, key: str, default: Callable) -> Callable:
    if value is None:
        return default
    if callable(value):
        return value
    try:
        return table[value]
    except KeyError:
        raise InvalidConfigError(f"Unknown {key} {value!r}; known: {', '.join(table)} or a "
                                 "Python callable") from None


def serializer(value: Any, key: str) -> Callable[[Any], bytes]:
    fn = resolve(value, SERIALIZERS, key, _bytes)
    return lambda v: None if v is None else fn(v)


def deserializer(value: Any, key: str) -> Callable[[bytes], Any]:
    fn = resolve(value, DESERIALIZERS, key, lambda b: b)
    return lambda v: None if v is None else fn(v)
