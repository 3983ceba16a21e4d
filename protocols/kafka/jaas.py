"""Kafka's ``sasl.jaas.config`` values (Kafka's JaasConfig): login modules, each
``<class> <flag> [name=value ...];``, values bare words or double-quoted strings.

    org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret" user_alice="alice-secret";
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

FLAGS = ("required", "requisite", "sufficient", "optional")
_TOKEN = re.compile(r'\s+|//[^\n]*|/\*.*?\*/|"((?:[^"\\]|\\.)*)"|([^\s=;"]+)|(=)|(;)|(.)',
                    re.S)


class JaasConfigError(ValueError):
    """A value Kafka's JaasConfig would refuse (``Invalid JAAS config: ...``)."""


@dataclass(frozen=True)
class LoginModule:
    name: str
    flag: str
    options: dict[str, str] = field(default_factory=dict)


def _tokens(text: str) -> list[tuple[str, str]]:
    out = []
    for m in _TOKEN.finditer(text):
        quoted, word, equals, semicolon, other = m.groups()
        if quoted is not None:
            out.append(("value", re.sub(r"\\(.)", r"\1", quoted)))
        elif word is not None:
            out.append(("word", word))
        elif equals or semicolon:
            out.append((equals or semicolon, equals or semicolon))
        elif other is not None:
            raise JaasConfigError(f"Invalid JAAS config: unexpected {other!r}")
    return out


def parse_jaas_config(text: str) -> list[LoginModule]:
    tokens = _tokens(text)
    modules = []
    i = 0
    while i < len(tokens):
        kind, name = tokens[i]
        if kind != "word":
            raise JaasConfigError(f"Invalid JAAS config: expected a login module's class, "
                                  f"got {name!r}")
        if i + 1 >= len(tokens) or tokens[i + 1][1].lower() not in FLAGS:
            raise JaasConfigError(f"Invalid JAAS config: login module control flag not "
                                  f"specified or invalid for {name} (one of "
                                  f"{', '.join(FLAGS)})")
        flag = tokens[i + 1][1].lower()
        i += 2
        options: dict[str, str] = {}
        while i < len(tokens) and tokens[i][0] != ";":
            if i + 2 >= len(tokens) or tokens[i][0] != "word" or tokens[i + 1][0] != "=" \
                    or tokens[i + 2][0] not in ("word", "value"):
                raise JaasConfigError(f"Invalid JAAS config: expected name=value options "
                                      f"for {name}")
            options[tokens[i][1]] = tokens[i + 2][1]
            i += 3
        if i >= len(tokens):
            raise JaasConfigError(f"Invalid JAAS config: login module {name} is not "
                                  "terminated by ';'")
        i += 1
        modules.append(LoginModule(name, flag, options))
    if not modules:
        raise JaasConfigError("Invalid JAAS config: no login module")
    return modules
