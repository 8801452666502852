"""hiera's minimal core: hook specifications, protocols, records, config, the engine and the CLI.

Plugins import only the names exported here (and the records and protocols modules): that is the plugin surface. A program embedding
hiera calls `run`, `resume`, `replay`, `evaluate` and `settings` (from `hiera_core.api`, loaded on first use)
and catches `HieraError` (every error hiera raises for bad input is one; the common ones are exported here:
`ConfigError`, `PluginError`, `UnknownName`, `RunDirError`, `UnsupportedArchitecture`, `BackendError`).
"""

import pluggy

from hiera_core.config import ConfigError
from hiera_core.errors import HieraError
from hiera_core.hookspecs import PROJECT
from hiera_core.plugins import PluginError, UnknownName
from hiera_core.protocols import (
    AgentAnswer,
    AgentRequest,
    Architecture,
    BackendError,
    Built,
    Direction,
    DirectionKnowledge,
    EvalJob,
    Evaluator,
    Executor,
    ExecutorError,
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
from hiera_core.store import RunDirError
from hiera_judge.source_rules import SourceRule, admitted, violation

__version__ = "0.1.0"

hookimpl = pluggy.HookimplMarker(PROJECT)
"""Marks a plugin's hook implementations: `@hookimpl def hiera_register_workloads(): ...`."""

__all__ = [
    "AgentAnswer",
    "AgentRequest",
    "Architecture",
    "BackendError",
    "Built",
    "ConfigError",
    "Direction",
    "DirectionKnowledge",
    "EvalJob",
    "Evaluator",
    "Executor",
    "ExecutorError",
    "HieraError",
    "ImplementationSpace",
    "Knob",
    "LLMBackend",
    "NoSeed",
    "PluginError",
    "RunDirError",
    "SourceRule",
    "StagePassed",
    "StrategyTemplate",
    "Template",
    "UnknownName",
    "UnsupportedArchitecture",
    "Workload",
    "__version__",
    "admitted",
    "evaluate",
    "hookimpl",
    "replay",
    "resume",
    "run",
    "settings",
    "violation",
]

_API = ("evaluate", "replay", "resume", "run", "settings")


def __getattr__(name: str):
    """`hiera_core.run` and the rest of the embedding API, imported on first use: plugins importing this package
    for `hookimpl` do not load the engine."""
    if name in _API:
        from hiera_core import api

        return getattr(api, name)
    raise AttributeError(f"module 'hiera_core' has no attribute {name!r}")
