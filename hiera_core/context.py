"""The run context: what a plugin serving a run (a backend, an observer) may read about it.

Read-only and built once per run, before any backend, so a backend is constructed complete
(`cls(config, context)`) and never reaches around its requests into the session.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from typing import Any

import attrs

from hiera_core.config import RunConfig
from hiera_core.plugins import UnknownName
from hiera_core.protocols import Direction, DirectionKnowledge, ImplementationSpace, Workload
from hiera_core.records import Task


def _read_only(mapping: Mapping[str, Any]) -> Mapping[str, Any]:
    return types.MappingProxyType(dict(mapping))


@attrs.frozen(kw_only=True)
class RunContext:
    run: RunConfig
    """The `[run]` settings in force (plugin defaults filled in)."""
    workload: Workload
    task: Task
    arch: str
    """The architecture's name."""
    kind: str
    """The architecture's kind (`Architecture.kind`): what the workload's side and templates are for."""
    spaces: tuple[ImplementationSpace, ...]
    """Every registered space, most controlled (lowest rank) first."""
    directions: Mapping[str, Direction] = attrs.field(converter=_read_only)
    """Every registered direction by letter, in the directions' order."""
    knowledge: Mapping[str, DirectionKnowledge] = attrs.field(converter=_read_only)
    """What the architecture plugins know of each direction on this run's kind (`hiera_direction_knowledge`), by
    letter, an entry for every direction: one that no plugin knows of on this kind has texts that say so and no
    strategies (`hiera_core.plugins.direction_knowledge`)."""
    hardware: str = ""
    """The architecture's account of its hardware (`Architecture.describe_hardware`, else its `hardware()` listed),
    quoted in the prompts' Target section; empty for a session that only builds."""
    space_rules: Mapping[str, str] = attrs.field(factory=dict, converter=_read_only)
    """What each space admits on this architecture, by space name, in the terms its checks enforce
    (`Architecture.describe_space(rank)`, else the space's own description): what the prompts quote of a space."""
    notices: tuple[str, ...] = ()
    """One-line messages for the user about how the run was set up (the architecture `auto` chose, a sandbox
    part this machine lacks)."""

    def space(self, name: str) -> ImplementationSpace:
        for space in self.spaces:
            if space.name == name:
                return space
        raise UnknownName("space", name, [s.name for s in self.spaces])
