"""Kafka's ``sasl.jaas.config`` values (Kafka's JaasConfig): login modules, each
``<class> <flag> [name=value ...];``, read with the tokenizer Kafka reads them with (Java's
StreamTokenizer: words, numbers, strings in double or single quotes with Java's escapes,
``//``, ``/* */`` and ``/`` comments).

    org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret" user_alice="alice-secret";
"""
from __future__ import annotations

from dataclasses import dataclass, field

FLAGS = ("required", "requisite", "sufficient", "optional")
_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}


class JaasConfigError(ValueError):
    """A value Kafka's JaasConfig would refuse."""


@dataclass(frozen=True)
class LoginModule:
    name: str
    flag: str
    options: dict[str, str] = field(default_factory=dict, repr=False)   # passwords


def _word_start(c: str) -> bool:
    return c.isascii() and c.isalpha() or c >= "\u00a0" or c in "-_$"


def _quoted(text: str, i: int) -> tuple[str, int]:
    """The string opened by the quote at ``i``: to the same quote or the end of the line."""
    quote, i, out = text[i], i + 1, []
    while i < len(text) and text[i] != quote and text[i] not in "\n\r":
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            c, i = text[i + 1], i + 2
            if "0" <= c <= "7":
                digits = c
                longest = 3 if c <= "3" else 2
                while len(digits) < longest and i < len(text) and "0" <= text[i] <= "7":
                    digits, i = digits + text[i], i + 1
                out.append(chr(int(digits, 8)))
            else:
                out.append(_ESCAPES.get(c, c))
            continue
        out.append(c)
        i += 1
    return "".join(out), i + (1 if i < len(text) and text[i] == quote else 0)


def _tokens(text: str) -> list[tuple[str, str]]:
    """(kind, text): kind ``word``, ``string`` or ``number``, else the character itself."""
    out: list[tuple[str, str]] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c <= " ":
            i += 1
        elif c == "/":
            end = text.find("*/", i + 2) + 2 if text.startswith("/*", i) else \
                text.find("\n", i) + 1
            i = n if end <= 1 else end
        elif c in "\"'":
            value, i = _quoted(text, i)
            out.append(("string", value))
        elif c.isdigit() or c == ".":
            j = i
            while j < n and (text[j].isdigit() or text[j] == "."):
                j += 1
            out.append(("number", text[i:j]))
            i = j
        elif _word_start(c):
            j = i + 1
            while j < n and (_word_start(text[j]) or text[j].isdigit() or text[j] == "."):
                j += 1
            out.append(("word", text[i:j]))
            i = j
        else:
            out.append((c, c))
            i += 1
    return out


def parse_jaas_config(text: str) -> list[LoginModule]:
    tokens = _tokens(text)
    modules = []
    i = 0

    def text_of(k: int) -> str | None:   # a token's string value (Java's sval)
        return tokens[k][1] if k < len(tokens) and tokens[k][0] in ("word", "string") \
            else None
    while i < len(tokens):
        name = text_of(i)
        if i + 1 >= len(tokens):
            raise JaasConfigError("Login module control flag not specified in JAAS config")
        flag = text_of(i + 1)
        if flag is None or flag.lower() not in FLAGS:
            raise JaasConfigError(f"Invalid login module control flag '{flag}' in JAAS config")
        i += 2
        options: dict[str, str] = {}
        while i < len(tokens) and tokens[i][0] != ";":
            key = text_of(i)
            if i + 1 >= len(tokens) or tokens[i + 1][0] != "=" or text_of(i + 2) is None:
                raise JaasConfigError(f"Value not specified for key "
                                      f"'{'null' if key is None else key}' in JAAS config")
            options[str(key)] = text_of(i + 2)
            i += 3
        if i >= len(tokens):
            raise JaasConfigError("JAAS config entry not terminated by semi-colon")
        i += 1
        modules.append(LoginModule(str(name), flag.lower(), options))
    if not modules:
        raise JaasConfigError("Login module not specified in JAAS config")
    return modules
