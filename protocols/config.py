"""Kafka-style configuration: dotted names, typed values, Kafka's defaults, clear errors.

A ``ConfigDef`` lists the keys a component accepts. ``ConfigDef.parse`` takes the user's dict
(``{"segment.bytes": 1048576}``) and/or keyword arguments with dots spelled as underscores
(``segment_bytes=1048576``), converts strings the way Kafka's ConfigDef does, validates, and
fills in defaults. Unknown names and bad values raise ``InvalidConfigError`` naming the key and,
for a misspelling, the closest known name.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from protocols.errors import InvalidConfigError

INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1

_TRUE = {"true", "1", "yes"}
_FALSE = {"false", "0", "no"}


def _to_int(name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise InvalidConfigError(f"Invalid value {value!r} for configuration {name}: "
                                 "expected an integer")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            pass
    raise InvalidConfigError(f"Invalid value {value!r} for configuration {name}: "
                             "expected an integer")


def _to_float(name: str, value: Any) -> float:
    if isinstance(value, bool):
        raise InvalidConfigError(f"Invalid value {value!r} for configuration {name}: "
                                 "expected a number")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise InvalidConfigError(f"Invalid value {value!r} for configuration {name}: "
                                 "expected a number") from None


def _to_bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise InvalidConfigError(f"Invalid value {value!r} for configuration {name}: "
                             "expected true or false")


def _to_str(name: str, value: Any) -> str:
    if isinstance(value, str):
        return value.strip()
    raise InvalidConfigError(f"Invalid value {value!r} for configuration {name}: "
                             "expected a string")


def _to_list(name: str, value: Any) -> list[str]:
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    if isinstance(value, (list, tuple)):
        return [_to_str(name, v) for v in value]
    raise InvalidConfigError(f"Invalid value {value!r} for configuration {name}: "
                             "expected a comma-separated list")


def _to_callable(name: str, value: Any) -> Any:
    """A Python callable (serializers, listeners), or a name the caller resolves."""
    if value is None or callable(value) or isinstance(value, str):
        return value
    raise InvalidConfigError(f"Invalid value {value!r} for configuration {name}: "
                             "expected a callable")


class Password:
    """A secret's value (Kafka's ``Password``): shown as ``[hidden]`` wherever the config is
    printed, logged or described; ``.value`` is the secret."""
    __slots__ = ("value",)
    HIDDEN = "[hidden]"

    def __init__(self, value: str):
        self.value = value

    def __repr__(self) -> str:
        return self.HIDDEN

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Password) and other.value == self.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __reduce__(self):   # to a Ray actor, as itself
        return (Password, (self.value,))


def _to_password(name: str, value: Any) -> Password:
    if isinstance(value, Password):
        return value
    if isinstance(value, str):
        return Password(value)
    raise InvalidConfigError(f"Invalid value for configuration {name}: expected a string "
                             "(a password)")


_CONVERTERS: dict[str, Callable[[str, Any], Any]] = {
    "int": _to_int, "long": _to_int, "double": _to_float, "boolean": _to_bool,
    "string": _to_str, "list": _to_list, "callable": _to_callable, "password": _to_password,
}


def at_least(minimum: float) -> Callable[[str, Any], None]:
    def check(name: str, value: Any) -> None:
        if value < minimum:
            raise InvalidConfigError(f"Invalid value {value} for configuration {name}: "
                                     f"Value must be at least {minimum}")
    return check


def between(low: float, high: float) -> Callable[[str, Any], None]:
    def check(name: str, value: Any) -> None:
        if not low <= value <= high:
            raise InvalidConfigError(f"Invalid value {value} for configuration {name}: "
                                     f"Value must be in [{low}, {high}]")
    return check


def one_of(*choices: str) -> Callable[[str, Any], None]:
    def check(name: str, value: Any) -> None:
        values = value if isinstance(value, list) else [value]
        for v in values:
            if v not in choices:
                raise InvalidConfigError(f"Invalid value {v!r} for configuration {name}: "
                                         f"String must be one of: {', '.join(choices)}")
    return check


@dataclass(frozen=True)
class ConfigKey:
    name: str
    type: str
    default: Any
    validator: Callable[[str, Any], None] | None = None
    doc: str = ""
    nullable: bool = False

    def convert(self, value: Any) -> Any:
        if value is None:
            if self.nullable:
                return None
            raise InvalidConfigError(f"Invalid value None for configuration {self.name}: "
                                     "a value is required")
        converted = _CONVERTERS[self.type](self.name, value)
        if self.validator is not None:
            self.validator(self.name, converted)
        return converted


@dataclass
class ConfigDef:
    """The keys one component accepts. ``ignored`` names are accepted and dropped (for
    instance a broker-wide key passed to a topic), everything else unknown is an error."""

    keys: dict[str, ConfigKey] = field(default_factory=dict)

    def define(self, name: str, type: str, default: Any, validator=None, doc: str = "",
               nullable: bool = False) -> "ConfigDef":
        if type not in _CONVERTERS:
            raise ValueError(f"unknown config type {type}")
        self.keys[name] = ConfigKey(name, type, default, validator, doc, nullable)
        return self

    def names(self) -> list[str]:
        return sorted(self.keys)

    def normalize_name(self, name: str) -> str:
        """Accept ``linger_ms`` for ``linger.ms``; Kafka's names never contain underscores."""
        if name in self.keys:
            return name
        dotted = name.replace("_", ".")
        if dotted in self.keys:
            return dotted
        close = difflib.get_close_matches(dotted, self.keys.keys(), n=1, cutoff=0.6)
        hint = f" Did you mean '{close[0]}'?" if close else ""
        raise InvalidConfigError(f"Unknown configuration '{name}'.{hint}")

    def parse(self, given: Mapping[str, Any] | None = None, *, defaults: bool = True,
              **kwargs: Any) -> dict[str, Any]:
        """Validate ``given`` and ``kwargs`` and return a complete dict of dotted names.
        With ``defaults=False`` only the given keys are returned (for overrides)."""
        values: dict[str, Any] = {}
        for source in (given or {}), kwargs:
            for raw_name, raw_value in source.items():
                name = self.normalize_name(raw_name)
                values[name] = self.keys[name].convert(raw_value)
        if not defaults:
            return values
        return {name: values.get(name, key.default) for name, key in self.keys.items()}

    def validate_names(self, names: Iterable[str]) -> None:
        for n in names:
            self.normalize_name(n)
