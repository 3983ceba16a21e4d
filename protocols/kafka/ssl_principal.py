"""Kafka's ``ssl.principal.mapping.rules`` (KIP-371, Kafka's SslPrincipalMapper): a client
certificate's subject, as an RFC 2253 distinguished name (``CN=Duke,OU=ServiceUsers,O=Org``),
mapped to the principal's name by the first rule that applies.

    RULE:<pattern>/<replacement>/[L|U], ..., DEFAULT

A rule applies when its pattern (a regular expression) matches the whole name; the name is
then rewritten with the replacement (``$1`` for a group, as in Java) and lowered (``L``) or
raised (``U``). ``DEFAULT`` is the name as it is. No rule applying is an error: the
connection fails to authenticate. Rules are written in Java's regular-expression syntax;
the patterns Kafka's documentation uses read the same in Python's.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

DEFAULT_RULES = "DEFAULT"
ANONYMOUS = "User:ANONYMOUS"

_RULE = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(,\s*|$)")
_PARSER = re.compile(_RULE)


class NoMatchingRule(ValueError):
    """No rule maps the name (Kafka's SslPrincipalMapper.NoMatchingRule)."""


@dataclass(frozen=True)
class Rule:
    pattern: str | None = None       # None: DEFAULT
    replacement: str | None = None
    lower: bool = False
    upper: bool = False

    def __post_init__(self):
        if self.pattern is not None:
            object.__setattr__(self, "compiled", _compile(self.pattern))

    def apply(self, name: str) -> str | None:
        if self.pattern is None:
            return name
        compiled = self.compiled
        m = compiled.fullmatch(name)
        if m is None:
            return None
        result = compiled.sub(_python_replacement(self.replacement or "", compiled.groups),
                              name)
        if self.lower:
            return result.lower()
        if self.upper:
            return result.upper()
        return result

    def __str__(self) -> str:
        if self.pattern is None:
            return "DEFAULT"
        text = "RULE:" + self.pattern
        if self.replacement is not None:
            text += "/" + self.replacement
        return text + ("/L" if self.lower else "/U" if self.upper else "")


def _compile(pattern: str) -> re.Pattern:
    """A rule's pattern, written for Java's regular expressions, as Python reads it. Java
    allows inline flags anywhere (``^(?i)cn=...``, common in rules); Python only at the start,
    so flags that follow the anchor are moved before it; Java's named groups ``(?<name>``
    are Python's ``(?P<name>``. A pattern Python cannot read is an
    invalid rule, found when the rules are read (the broker does not start), as Kafka's
    Pattern.compile finds its own."""
    m = re.match(r"^\^(\(\?[aiLmsux]+\))", pattern)
    if m is not None:
        pattern = m.group(1) + "^" + pattern[m.end():]
    pattern = re.sub(r"\(\?<([A-Za-z][A-Za-z0-9]*)>", r"(?P<\1>", pattern)
    try:
        return re.compile(pattern)
    except re.error as e:
        raise ValueError(f"Invalid rule: pattern {pattern!r} is not a regular expression "
                         f"this broker reads: {e}") from None


def _python_replacement(java: str, groups: int) -> str:
    """Java's replacement syntax (``$n`` a group, ``\\x`` the character x) in Python's.
    ``$`` and a digit naming no group of the pattern is the text itself (Kafka escapes it);
    otherwise the digits after it are the group while they name one (``$12`` with one group
    is group 1, then ``2``), as Java reads them."""
    out = []
    i = 0
    while i < len(java):
        c = java[i]
        if c == "\\" and i + 1 < len(java):
            c, i = java[i + 1], i + 1
        elif c == "$" and i + 1 < len(java) and java[i + 1].isdigit() \
                and int(java[i + 1]) <= groups:
            n, i = int(java[i + 1]), i + 2
            while i < len(java) and java[i].isdigit() and n * 10 + int(java[i]) <= groups:
                n, i = n * 10 + int(java[i]), i + 1
            out.append(f"\\g<{n}>")
            continue
        out.append("\\\\" if c == "\\" else c)
        i += 1
    return "".join(out)


def parse_rules(rules: str | None) -> list[Rule]:
    """``ssl.principal.mapping.rules`` -> its rules; a malformed one raises ValueError, as
    Kafka's IllegalArgumentException (``Invalid rule: ...``)."""
    text = DEFAULT_RULES if rules is None else rules
    parsed = []
    for m in _SPLITTER.finditer(text.strip()):
        rule = m.group(1)
        p = _PARSER.match(rule)
        if p is None:
            raise ValueError(f"Invalid rule: {rule}")
        if p.end() != len(rule):
            raise ValueError(f"Invalid rule: `{rule}`, unmatched substring: "
                             f"`{rule[p.end():]}`")
        if p.group(1) is not None:
            parsed.append(Rule())
        elif p.group(2) is not None:
            parsed.append(Rule(p.group(2), p.group(4), p.group(6) == "L", p.group(6) == "U"))
        # else an empty rule, ignored as Kafka ignores it
    return parsed


class SslPrincipalMapper:
    def __init__(self, rules: str | None = None):
        self.rules = parse_rules(rules)

    def name(self, distinguished_name: str) -> str:
        for rule in self.rules:
            mapped = rule.apply(distinguished_name)
            if mapped is not None:
                return mapped
        raise NoMatchingRule(f"No rules apply to {distinguished_name}, rules "
                             f"[{', '.join(map(str, self.rules))}]")

    def principal(self, distinguished_name: str | None) -> str:
        """The connection's principal: ``User:<mapped name>``, or ``User:ANONYMOUS`` for a
        client that showed no certificate (Kafka's DefaultKafkaPrincipalBuilder)."""
        if distinguished_name is None:
            return ANONYMOUS
        return "User:" + self.name(distinguished_name)

    def __str__(self) -> str:
        return f"SslPrincipalMapper(rules = [{', '.join(map(str, self.rules))}])"
