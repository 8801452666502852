"""Every extension point of hiera, one hook each. The docstring of a hook is its contract.

Registration hooks (`hiera_register_<kind>`) are called once, when the session collects its
registries, before any configuration is structured; each returns a list of classes whose `name`
ClassVar is their identity. Observer hooks (`hiera_<noun>_<past tense>`) are called by the engine as
things happen, with the run's read-only `RunContext` (`hiera_core.context`), never the session; their
return values are ignored and an exception in one stops the run, so keep them cheap and robust. A plugin
implements them with `from hiera_core import hookimpl`.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from hiera_core.context import RunContext
    from hiera_core.protocols import (
        Architecture,
        Direction,
        DirectionKnowledge,
        Evaluator,
        Executor,
        ImplementationSpace,
        LLMBackend,
        Search,
        Workload,
    )
    from hiera_core.records import Candidate, Evaluation, Plan, RunManifest

PROJECT = "hiera"
hookspec = pluggy.HookspecMarker(PROJECT)


@hookspec(historic=True)
def hiera_addhooks(pluginmanager: pluggy.PluginManager) -> None:
    """Add hook specifications of a plugin's own with `pluginmanager.add_hookspecs(module)`.

    Called once per plugin, when it is registered (historic: late plugins receive it too), before
    the manager checks that every implemented hook has a specification.
    """


@hookspec
def hiera_register_workloads() -> list[type[Workload]]:
    """Return the Workload classes this plugin provides (see `protocols.Workload`)."""


@hookspec
def hiera_register_spaces() -> list[type[ImplementationSpace]]:
    """Return the ImplementationSpace classes this plugin provides; ranks must be distinct."""


@hookspec
def hiera_register_directions() -> list[type[Direction]]:
    """Return the Direction classes this plugin provides; a direction's `name` is its letter."""


@hookspec
def hiera_direction_knowledge(direction: str, kind: str) -> DirectionKnowledge | None:
    """Return what this plugin knows of direction `direction` (its letter) on architectures of kind `kind`
    (`Architecture.kind`: `host`, `cuda`, a third party's): the knowledge and rubric the prompts quote and the
    strategy catalogue by space rank (`DirectionKnowledge`), or None when it knows nothing of that pair.

    Called once per run, when the session is built, for every registered direction and the run's kind; the
    answers are the run's `RunContext.knowledge`. Not firstresult: every plugin is asked, and two answers for
    one (direction, kind) are an error naming both plugins (what a prompt quotes never depends on which plugin
    happened to load last). A direction no plugin answers for is still scored; its prompts say that nothing is
    known of it on this kind, and it offers no strategies."""


@hookspec
def hiera_register_backends() -> list[type[LLMBackend]]:
    """Return the LLM backend classes this plugin provides (selected with `--backend NAME`)."""


@hookspec
def hiera_register_architectures() -> list[type[Architecture]]:
    """Return the Architecture classes this plugin provides (selected with `--arch NAME`)."""


@hookspec
def hiera_register_evaluators() -> list[type[Evaluator]]:
    """Return evaluator stage classes; each serves one architecture (its `arch` ClassVar)."""


@hookspec
def hiera_register_executors() -> list[type[Executor]]:
    """Return executor classes (selected with the `executor` key of `[run]`)."""


@hookspec
def hiera_register_searches() -> list[type[Search]]:
    """Return search strategy classes (how a round's candidates are written; selected with `--strategy NAME`)."""


@hookspec
def hiera_run_defaults() -> dict[str, str]:
    """Return `[run]` keys this plugin is the default for, e.g. `{"workload": "stencil2d"}`: what a run uses
    when neither the config nor the command line names one (`workload`, `backend`, `executor`, `strategy`).
    Two plugins giving the same key are an error naming both."""


@hookspec
def hiera_register_commands(commands: argparse._SubParsersAction) -> None:
    """Add the plugin's own `hiera` commands: `parser = commands.add_parser(NAME, help=...)`, its options
    (`hiera_core.cli.common_options(parser)` gives `--config`, `--set`, `--plugin`, `--log-level`), and
    `parser.set_defaults(handler=function)`, called as `function(args, console) -> exit code`. A handler
    that raises `hiera_core.cli.UsageError` or `ConfigError` prints one line and exits 2."""


@hookspec
def hiera_run_started(context: RunContext, manifest: RunManifest, run_dir: Path) -> None:
    """Called once a run directory is ready, before the initial candidate is evaluated (and again
    when a run is resumed)."""


@hookspec
def hiera_plan_made(context: RunContext, plan: Plan) -> None:
    """Called when a round's space, direction scores and strategy are known and on disk (not for
    plans read back on resume, nor in `--no-planning` runs, which make none)."""


@hookspec
def hiera_candidate_evaluated(context: RunContext, candidate: Candidate, evaluation: Evaluation) -> None:
    """Called after each candidate's evaluation is on disk (also for records replayed on resume)."""


@hookspec
def hiera_round_finished(context: RunContext, round: int, best: Candidate | None, best_latency_ms: float | None) -> None:
    """Called at the end of every round (round 0 is the initial candidate) with the best so far."""


@hookspec
def hiera_run_finished(context: RunContext, run_dir: Path, best: Candidate | None) -> None:
    """Called once per run (or resume), after the winner was re-measured and `report.md` written;
    `best` is None when no candidate was valid."""
