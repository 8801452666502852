"""Source rules: what an architecture forbids in a candidate's source below a space rank.

Each architecture enforces the implementation spaces on its own terms (`Architecture.check_source`); a rule
names a pattern, what it is, and the lowest space rank that admits it. The spaces themselves only say
their name, rank and description.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import attrs


@attrs.frozen
class SourceRule:
    pattern: str
    """A regular expression, searched in the source with comments removed."""
    what: str
    """What a match is, in words an error message can quote ("an OpenMP pragma")."""
    admitted_from: int
    """The lowest space rank that admits it."""


def violation(source: str, rules: Sequence[SourceRule], rank: int) -> str | None:
    """Why `source` breaks the rules of a space of `rank` (the first rule it breaks, with its line), or None."""
    code = re.sub(r"//[^\n]*|/\*.*?\*/", "", source, flags=re.S)
    for rule in rules:
        if rank >= rule.admitted_from:
            continue
        match = re.search(rule.pattern, code)
        if match:
            line = code[: match.start()].count("\n") + 1
            return f"uses {rule.what} (`{match.group(0).strip()}`, line {line}), which this space does not admit"
    return None


def admitted(rules: Sequence[SourceRule], rank: int) -> tuple[list[str], list[str]]:
    """(what a space of `rank` admits, what its source check rejects): the rules' `what`, each once, in the
    rules' order; for an architecture's description of a space in the terms its check enforces."""
    yes = list(dict.fromkeys(rule.what for rule in rules if rank >= rule.admitted_from))
    no = [what for what in dict.fromkeys(rule.what for rule in rules if rank < rule.admitted_from) if what not in yes]
    return yes, no
