"""The wire codec between actors: msgpack, with the message dataclasses and Kafka errors as
extension types, so an error keeps its class and numeric code on the other side.

    data = encode(FetchRequest(2, 100))        # bytes
    decode(data) == FetchRequest(2, 100)

Arrays decode as tuples (hashable, and a dict key such as a (topic, partition) pair
survives); dataclass fields come back positionally, so a message class's field order is
its wire format.
"""
from __future__ import annotations

import dataclasses
import functools
from enum import Enum
from typing import Any, Callable, TypeVar

import msgpack

from protocols.errors import InvalidRequestError, KafkaError, error_for_code

_MESSAGE, _ERROR = 1, 2
_TYPES: dict[str, type] = {}
T = TypeVar("T", bound=type)


def message(cls: T) -> T:
    """Register a dataclass as a wire message (by class name: one name, one class)."""
    name = cls.__name__
    if _TYPES.get(name, cls) is not cls:
        raise TypeError(f"two wire messages named {name}")
    _TYPES[name] = cls
    return cls


def _default(obj: Any) -> Any:
    if isinstance(obj, KafkaError):
        return msgpack.ExtType(_ERROR, msgpack.packb([obj.code, str(obj)]))
    if dataclasses.is_dataclass(obj) and type(obj).__name__ in _TYPES:
        values = [type(obj).__name__] + [getattr(obj, f.name) for f in dataclasses.fields(obj)]
        return msgpack.ExtType(_MESSAGE, _pack(values))
    if isinstance(obj, Enum):
        return obj.value
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    raise TypeError(f"{type(obj).__name__} is not a wire message: register it with @message")


def _ext_hook(code: int, data: bytes) -> Any:
    if code == _MESSAGE:
        name, *values = decode(data)
        return _TYPES[name](*values)
    if code == _ERROR:
        error_code, text = msgpack.unpackb(data, raw=False)
        return error_for_code(error_code, text)
    return msgpack.ExtType(code, data)


def _pack(obj: Any) -> bytes:
    return msgpack.packb(obj, default=_default, use_bin_type=True)


def encode(obj: Any) -> bytes:
    return _pack(obj)


# What msgpack and the message constructors raise on bytes that are not a message: msgpack's
# own errors (ValueError subclasses), an unknown message name (KeyError), the wrong number
# of fields (TypeError), a too deep nesting (RecursionError).
MALFORMED = (msgpack.UnpackException, ValueError, TypeError, KeyError, IndexError,
             OverflowError, RecursionError)
F = TypeVar("F", bound=Callable)


def refusing_malformed(what: str) -> Callable[[F], F]:
    """A decoder that answers malformed bytes with INVALID_REQUEST naming ``what`` and the
    cause, rather than with whichever exception the bytes happened to provoke."""
    def wrap(decoder: F) -> F:
        @functools.wraps(decoder)
        def decoding(data, *args, **kwargs):
            try:
                return decoder(data, *args, **kwargs)
            except MALFORMED as e:
                raise InvalidRequestError(f"Malformed {what} ({len(data)} bytes): "
                                          f"{type(e).__name__}: {e}") from None
        return decoding  # type: ignore[return-value]
    return wrap


@refusing_malformed("actor message")
def decode(data: bytes) -> Any:
    return msgpack.unpackb(data, ext_hook=_ext_hook, raw=False, use_list=False,
                           strict_map_key=False)
