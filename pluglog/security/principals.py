"""Principals of TLS client certificates: Kafka's ``ssl.principal.mapping.rules``.

On an SSL listener the principal is ``User:`` plus the certificate subject
as an RFC 2253/4514 distinguished name (``CN=alice,OU=eng,O=example``, the
most specific name first, as Java's ``X500Principal.getName()`` gives it).
``ssl.principal.mapping.rules`` rewrites it as Kafka's SslPrincipalMapper
does: a comma-separated list of ``RULE:pattern/replacement/[L|U]`` and
``DEFAULT``; the first rule whose pattern matches the whole name applies
(``$1`` in the replacement is the first group; ``L``/``U`` lower-/upper-case
the result), ``DEFAULT`` keeps the name. No matching rule: the connection
is refused, as Kafka fails the authentication.
"""

import dataclasses
import re

from pluglog.errors import ConfigError

_RULE = re.compile(r"\s*(?:(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?))\s*(?:,|$)")


@dataclasses.dataclass(frozen=True)
class MappingRule:
    pattern: object  # compiled regex, None for DEFAULT
    replacement: str = ""
    case: str = ""

    def apply(self, name):
        if self.pattern is None:
            return name
        if not self.pattern.fullmatch(name):
            return None
        mapped = self.pattern.sub(self.replacement, name)
        return (
            mapped.lower() if self.case == "L" else mapped.upper() if self.case == "U" else mapped
        )


def parse_mapping_rules(text):
    """The rules of ``ssl.principal.mapping.rules``; ConfigError naming a bad one."""
    rules, pos, text = [], 0, text.strip() or "DEFAULT"
    while pos < len(text):
        match = _RULE.match(text, pos)
        if match is None or match.end() == pos:
            raise ConfigError(f"ssl.principal.mapping.rules: cannot parse {text[pos:]!r}")
        pos = match.end()
        if match.group(1):
            rules.append(MappingRule(None))
            continue
        pattern, replacement, case = match.group(2), match.group(3), match.group(4)
        try:
            compiled = re.compile(pattern.replace("\\/", "/"))
        except re.error as exc:
            raise ConfigError(
                f"ssl.principal.mapping.rules: bad pattern {pattern!r}: {exc}"
            ) from None
        # Java's $1 group references become Python's \g<1>.
        python_replacement = re.sub(r"\$(\d+)", r"\\g<\1>", replacement.replace("\\/", "/"))
        rules.append(MappingRule(compiled, python_replacement, case))
    return rules


def map_principal(distinguished_name, rules):
    """The principal name for a certificate subject, or None if no rule applies."""
    for rule in rules:
        mapped = rule.apply(distinguished_name)
        if mapped is not None:
            return mapped
    return None
