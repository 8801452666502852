"""hiera's minimal core: hook specifications, protocols, records, config, the engine and the CLI.

Plugins import only the names exported here (and the records and protocols modules).
"""

import pluggy

from hiera_core.hookspecs import PROJECT
from hiera_core.protocols import (
    AgentAnswer,
    AgentRequest,
    Architecture,
    Direction,
    DirectionKnowledge,
    EvalJob,
    Evaluator,
    Executor,
    ImplementationSpace,
    Knob,
    LLMBackend,
    NoSeed,
    StagePassed,
    StrategyTemplate,
    Template,
    UnsupportedArchitecture,
    Workload,
)

__version__ = "0.1.0"

hookimpl = pluggy.HookimplMarker(PROJECT)
"""Marks a plugin's hook implementations: `@hookimpl def hiera_register_workloads(): ...`."""

__all__ = [
    "AgentAnswer",
    "AgentRequest",
    "Architecture",
    "Direction",
    "DirectionKnowledge",
    "EvalJob",
    "Evaluator",
    "Executor",
    "ImplementationSpace",
    "Knob",
    "LLMBackend",
    "NoSeed",
    "StagePassed",
    "StrategyTemplate",
    "Template",
    "UnsupportedArchitecture",
    "Workload",
    "__version__",
    "hookimpl",
]
