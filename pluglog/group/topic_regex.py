"""Subscription regular expressions of KIP-848 consumer groups, safely.

Kafka matches ``SubscribedTopicRegex`` with RE2J, whose matching time is
linear in the topic name. Python's ``re`` backtracks, so one crafted pattern
(``(a+)+$``) could keep the reactor busy for ever. :func:`compile_topic_regex`
therefore accepts what RE2 accepts minus the shapes that backtrack
exponentially: no repetition of something that itself repeats or
alternates, no back-references and no look-around (RE2 has neither), and at
most 1000 characters. Anything else raises :class:`ValueError` naming the
problem, which the heartbeat answers as INVALID_REGULAR_EXPRESSION.
"""

import functools
import re

# The parser of the standard library's own re module: its tree is what is
# checked (re._parser is sre_parse, kept private since Python 3.11).
from re import _constants as sre
from re import _parser

MAX_LENGTH = 1000
_REPEATS = {sre.MAX_REPEAT, sre.MIN_REPEAT, getattr(sre, "POSSESSIVE_REPEAT", sre.MAX_REPEAT)}
_REFUSED = {
    sre.GROUPREF: "back-references",
    sre.GROUPREF_EXISTS: "conditional groups",
    sre.ASSERT: "look-ahead/look-behind",
    sre.ASSERT_NOT: "look-ahead/look-behind",
}


def _items(tree):
    """Every (op, argument) of a parsed pattern, depth first, with whether it
    sits under an unbounded repetition."""
    stack = [(tree, False)]
    while stack:
        node, under = stack.pop()
        for op, arg in node:
            yield op, arg, under
            if op in _REPEATS:
                low, high, body = arg
                stack.append((body, under or high == sre.MAXREPEAT or high > 100))
            elif op == sre.SUBPATTERN:
                stack.append((arg[-1], under))
            elif op == sre.BRANCH:
                stack.extend((alt, under) for alt in arg[1])
            elif op in (sre.ASSERT, sre.ASSERT_NOT):
                stack.append((arg[1], under))
            elif op == sre.ATOMIC_GROUP:
                stack.append((arg, under))


@functools.lru_cache(maxsize=256)
def compile_topic_regex(pattern):
    """The compiled ``pattern``, or ValueError saying why it is refused."""
    if len(pattern) > MAX_LENGTH:
        raise ValueError(f"longer than {MAX_LENGTH} characters")
    try:
        tree = _parser.parse(pattern)
        compiled = re.compile(pattern)
    except re.error as exc:
        raise ValueError(str(exc)) from None
    for op, _arg, under in _items(tree):
        if op in _REFUSED:
            raise ValueError(f"{_REFUSED[op]} are not supported")
        if under and (op in _REPEATS or op == sre.BRANCH):
            raise ValueError("a repeated group may not repeat or alternate inside")
    return compiled
