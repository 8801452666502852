"""hiera as a library: settings, runs, resumes and single evaluations from Python, as the `hiera` command does
them (the command is built on these functions).

    import hiera_core

    result = hiera_core.run(workload="stencil2d", arch="host", rounds=1, population=2,
                            config={"workload": {"stencil2d": {"host_n": 64}}}, run_dir="runs/try")
    print(result.best_evaluation.latency_ms)

Nothing here reads a `hiera.toml` or `HIERA_*` variables unless asked (`config_dir`, `config_file`, `environ`),
prints, or configures logging: progress reaches the caller through the observer hooks of plugins it passes
(`plugins=[...]`: modules or objects, registered on a fresh plugin manager of this call), and log records go
through the caller's own structlog/logging configuration. Nothing is kept between calls, so runs in one
process, one after another or in threads, share no settings or plugins. Every error about the input is a
`HieraError` (`ConfigError`, `UnknownName`, `PluginError`, `RunDirError`, `BackendError`) whose message is the
line the command prints.

Two ends of a run are not a result: a pause (`Paused`: `AwaitingAnswers`, the backend will answer later, or
`AwaitingDevice`, a run resumed where its device is missing reached an evaluation; `resume` continues the run once
it can: the command's exit code 75) and `NoUsableAnswer` (the run finished, but no agent request got a usable
answer, so nothing was searched: exit code 1). A backend that can answer nothing (`BackendUnusable`: a rejected
key, an unknown model) stops the run at its first request (exit code 2). In every case what the run recorded stays
in its directory.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs
import pluggy

from hiera_core import protocols, records
from hiera_core.config import HieraConfig, config_from_table, load_config
from hiera_core.engine import DeviceWanted, Engine, check_replayable, create_run, evaluate_source, tables_in_use
from hiera_core.errors import HieraError
from hiera_core.plugins import PluginError, collect, make_plugin_manager
from hiera_core.protocols import AnswerPending, BackendUnusable, StagePassed
from hiera_core.report import CallCosts, agent_costs
from hiera_core.session import DeviceMissing, Session
from hiera_core.store import MANIFEST, RunDirError, RunStore


class SettingsError(HieraError, TypeError):
    """Settings given twice (a resolved `HieraConfig` and keywords)."""


class Paused(HieraError):
    """The run stopped to wait for something it will have later; everything done so far is in `run_dir`, and
    `resume(run_dir)` continues from there, redoing nothing (the command's exit code 75)."""

    def __init__(self, message: str, *, run_dir: Path) -> None:
        super().__init__(message)
        self.run_dir = run_dir


class AwaitingAnswers(Paused):
    """The run stopped to wait for answers its backend will have later (the `exchange` backend with
    `when_waiting = "pause"`): its requests are posted, and `resume(run_dir)` continues once they are answered. The
    message says how many wait, where, and what to run."""

    def __init__(self, message: str, *, run_dir: Path, waiting: int) -> None:
        super().__init__(message, run_dir=run_dir)
        self.waiting = waiting


class AwaitingDevice(Paused):
    """A run resumed where its architecture's device is missing (a planning machine beside the GPU's) did what needs no
    device (answers read, plans and candidates made) and stopped at the first step that evaluates: `resume(run_dir)`
    on a machine where the architecture runs continues it."""


class NoUsableAnswer(HieraError):
    """The run finished, but no request to its agents got a usable answer, so no round searched anything (the
    service failed every call, or every answer was unusable): `result` is what it recorded (its best, if any, the
    initial candidate). The message says why, from the last failed call."""

    def __init__(self, message: str, *, result: RunResult) -> None:
        super().__init__(message)
        self.result = result


@attrs.frozen(kw_only=True)
class RunResult:
    """What a run found, read back from its run directory."""

    run_dir: Path
    best: records.Candidate | None
    """The winner (None when no candidate was valid, or no finalist held up): the finalist with the lowest figure in
    the final re-measurement, or, with `remeasure=False`, the best of the search."""
    best_evaluation: records.Measured | None
    """The winner's evaluation in the search."""
    remeasured: records.Evaluation | None
    """The winner measured again in fresh processes on fresh inputs: the re-measurement at its median (None when the
    run did not re-measure)."""
    headline: records.Measured | None
    """The figure to quote (`records.Best.headline`): the re-measured one where there is one, else the search's."""
    finalists: list[records.Finalist]
    """The final re-measurement's standings, the winner first (empty when the run did not re-measure)."""
    evaluations: list[records.CandidateEvaluated]
    """Every candidate's evaluation, in the order they were recorded (the initial candidate first)."""
    plans: list[records.Plan]
    costs: CallCosts
    """The agents' calls, tokens and money."""
    notices: tuple[str, ...] = ()

    @classmethod
    def read(cls, store: RunStore, notices: Iterable[str] = ()) -> RunResult:
        evaluations = list(store.evaluated().values())
        winner = records.best_of(store.events)
        finished = [e for e in store.events if isinstance(e, records.RunFinished)]
        return cls(
            run_dir=store.path,
            best=winner.candidate if winner is not None else None,
            best_evaluation=winner.search if winner is not None else None,
            remeasured=finished[-1].remeasured if finished else None,
            headline=winner.headline if winner is not None else None,
            finalists=list(finished[-1].finalists) if finished else [],
            evaluations=evaluations,
            plans=[e.plan for e in store.events if isinstance(e, records.PlanMade)],
            costs=agent_costs(store.events),
            notices=tuple(notices),
        )


@attrs.frozen(kw_only=True)
class EvalResult:
    """One candidate through the evaluation pipeline."""

    candidate: records.Candidate
    evaluation: records.Evaluation | StagePassed
    """Its record; `StagePassed` when `device=False` stopped it, every stage before the device passed."""
    space: str
    workload: str
    task: str
    arch: str
    notices: tuple[str, ...] = ()


def settings(
    *,
    config: Mapping[str, Any] | None = None,
    config_file: str | Path | None = None,
    config_dir: str | Path | None = None,
    environ: Mapping[str, str] | None = None,
    sets: Iterable[str] = (),
    **run: Any,
) -> HieraConfig:
    """Resolve settings the way the command does: `run` keys (`workload`, `rounds`, ...: the `[run]` table's)
    over `sets` (`"workload.stencil2d.n=512"`, as `--set`) over `environ` (`HIERA_<KEY>`) over the file over
    the defaults. The file is `config_file`, or the `hiera.toml` / `[tool.hiera]` found in `config_dir`;
    `config` is a mapping in the file's shape (`{"run": {...}, "workload": {"stencil2d": {...}}}`), instead of a
    file. None of them is read unless given. An unknown key raises ConfigError."""
    if sum(x is not None for x in (config, config_file, config_dir)) > 1:
        raise SettingsError("give one of config, config_file and config_dir")
    run = {key: os.fspath(value) if isinstance(value, os.PathLike) else value for key, value in run.items()}
    if config_file is not None or config_dir is not None:
        directory = Path(config_dir) if config_dir is not None else Path(".")
        return load_config(
            directory,
            cli=run,
            overrides=list(sets),
            environ=environ or {},
            config_file=Path(config_file) if config_file is not None else None,
        )
    return config_from_table(config or {}, source="settings", cli=run, overrides=list(sets), environ=environ or {})


def session(config: HieraConfig, *, plugins: Iterable[Any] = (), entry_points: bool = True, device: bool = True) -> Session:
    """The run's session: a fresh plugin manager (the `hiera` entry points unless `entry_points=False`, then
    `plugins`), its registries and the plugins `config` selects. `device=False`: only builds will happen."""
    return Session.create(config, _plugin_manager(plugins, entry_points), device=device)


def run(
    resolved: HieraConfig | None = None, *, plugins: Iterable[Any] = (), entry_points: bool = True, **settings_: Any
) -> RunResult:
    """Run the loop to its end and return what it found. Settings are the keywords of `settings` (`workload=`,
    `rounds=`, `config=`, `sets=`, ...) or a configuration `resolved` by it, not both; the run directory is
    `run_dir` (a new `runs/<id>` under the current directory when empty)."""
    config = _resolved(resolved, settings_)
    run_session = session(config, plugins=plugins, entry_points=entry_points)
    with executing(run_session):
        store = create_run(run_session)
        return optimize(run_session, store)


def resume(run_dir: str | Path, *, plugins: Iterable[Any] = (), entry_points: bool = True) -> RunResult:
    """Continue a run from its directory; nothing recorded is redone (a finished run only re-reads). Where the run's
    architecture cannot run (a CPU machine for a cuda run), the steps that need no device go on (answers read, plans
    and candidates made, from the hardware and toolchain the run recorded) up to the next evaluation: then
    `AwaitingDevice`. A device of another model than the run's (an H200 for a run measured on an H100) is refused
    (`RunDirError`): a run's figures compare only on one device."""
    store = RunStore.open(Path(run_dir))
    pm = _plugin_manager(plugins, entry_points)
    config = config_from_table(tables_in_use(store.manifest.config, store, pm), source=f"{run_dir}/{MANIFEST}")
    try:
        run_session = Session.create(config, pm)
    except DeviceMissing as missing:
        run_session = Session.create(config, pm, device=False, recorded_hardware=store.manifest.hardware)
        return optimize(run_session, store, device_missing=str(missing))
    recorded, here = store.manifest.hardware.get("model"), run_session.arch.hardware().get("model")
    if recorded != here:
        raise RunDirError(
            f"{run_dir} was measured on {recorded} and this machine's {run_session.arch_name} device is {here}: a run's"
            " figures compare only on one device, so it goes on where that device is (or, to plan, where none is)"
        )
    return optimize(run_session, store)


def optimize(run_session: Session, store: RunStore, *, device_missing: str = "") -> RunResult:
    """The loop for a session and its run directory (a new one, or one to resume); `device_missing`: why the
    architecture cannot run here (the run stops at its first evaluation)."""
    try:
        with executing(run_session):
            Engine(run_session, store, device_missing=device_missing).optimize()
    except AnswerPending as exc:
        raise AwaitingAnswers(
            f"run paused: {exc.waiting} request(s) wait for an answer {exc}; then `hiera resume {store.path}` continues the run",
            run_dir=store.path,
            waiting=exc.waiting,
        ) from None
    except DeviceWanted as exc:
        raise AwaitingDevice(
            f"run paused: {exc}; `hiera resume {store.path}` where architecture '{run_session.arch_name}' runs continues the run",
            run_dir=store.path,
        ) from None
    except BackendUnusable as exc:
        raise BackendUnusable(
            f"{exc}: no request can be answered, so the run stops (what it recorded is in {store.path})"
        ) from exc
    result = RunResult.read(store, run_session.notices)
    calls = [e for e in store.events if isinstance(e, records.AgentCalled)]
    if calls and all(call.error is not None for call in calls):
        raise NoUsableAnswer(
            f"no agent request got a usable answer ({len(calls)} call(s) failed; the last: {calls[-1].error}), so nothing"
            " was searched",
            result=result,
        )
    return result


def replay(
    recorded: str | Path, *, plugins: Iterable[Any] = (), entry_points: bool = True, sets: Iterable[str] = (), **run_keys: Any
) -> RunResult:
    """Run `recorded` again with its configuration, every agent request answered from its answer cache (no
    model is called), into `run_dir` (a new `runs/<id>` when empty); `run_keys` and `sets` change the rest
    as for `run`. The same candidates and decisions come back (`hiera run --replay`)."""
    return run(
        replay_settings(recorded, plugins=plugins, entry_points=entry_points, sets=sets, **run_keys),
        plugins=plugins,
        entry_points=entry_points,
    )


def replay_settings(
    recorded: str | Path, *, plugins: Iterable[Any] = (), entry_points: bool = True, sets: Iterable[str] = (), **run_keys: Any
) -> HieraConfig:
    """The configuration `replay` runs: the recorded run's, with the installed backend that `replays` answering
    from `recorded` (one that is not usable any more is refused: `check_replayable`)."""
    if "backend" in run_keys:
        raise SettingsError("a replay is answered from the recorded run; it takes no backend")
    store = RunStore.open(Path(recorded))
    pm = _plugin_manager(plugins, entry_points)
    backends = collect(pm, "backends")
    replayers = [name for name in backends.names() if protocols.optional(backends.get(name), "replays")]
    if len(replayers) != 1:
        raise PluginError(
            f"a replay needs one installed backend that replays recorded answers, found {', '.join(replayers) or 'none'}"
        )
    check_replayable(store, pm)
    table = {key: dict(value) if isinstance(value, dict) else value for key, value in store.manifest.config.items()}
    table["run"] = {**table.get("run", {}), "backend": replayers[0], "run_dir": ""}
    table["backend"] = {**table.get("backend", {}), replayers[0]: {"source": str(Path(recorded).resolve())}}
    return config_from_table(tables_in_use(table, store, pm), source=f"{recorded}/{MANIFEST}", cli=run_keys, overrides=list(sets))


@contextlib.contextmanager
def executing(run_session: Session) -> Iterator[None]:
    """The session's executor opened (`Executor.open`: a cluster reached, or started) for the block, and closed
    after it however it ends; an executor that cannot evaluate raises ExecutorError before anything is written."""
    executor = run_session.executor
    if open_ := protocols.optional(executor, "open"):
        open_(run_session.pipeline)
    try:
        yield
    finally:
        if close := protocols.optional(executor, "close"):
            close()


def evaluate(
    source: str,
    resolved: HieraConfig | None = None,
    *,
    space: str | None = None,
    workdir: str | Path | None = None,
    device: bool = True,
    plugins: Iterable[Any] = (),
    entry_points: bool = True,
    **settings_: Any,
) -> EvalResult:
    """One candidate `source` through the same pipeline as a run's candidates (`hiera eval`), checked against
    `space` (default: the widest). Its build and logs go to `workdir` (default: a temporary folder, removed).
    `device=False` stops before the first stage that needs the device. Settings as for `run`."""
    config = _resolved(resolved, settings_)
    eval_session = session(config, plugins=plugins, entry_points=entry_points, device=device)
    space = space or eval_session.spaces[-1].name
    eval_session.space(space)  # an unknown space fails before any work
    with tempfile.TemporaryDirectory(prefix="hiera-eval-") as scratch:
        candidate, evaluation = evaluate_source(
            eval_session, source, space=space, workdir=Path(workdir) if workdir is not None else Path(scratch), device=device
        )
    return EvalResult(
        candidate=candidate,
        evaluation=evaluation,
        space=space,
        workload=eval_session.workload.name,
        task=eval_session.task.name,
        arch=eval_session.arch_name,
        notices=tuple(eval_session.notices),
    )


def _resolved(resolved: HieraConfig | None, keywords: dict[str, Any]) -> HieraConfig:
    if resolved is None:
        return settings(**keywords)
    if keywords:
        raise SettingsError(f"settings given twice: a resolved configuration and {', '.join(sorted(keywords))}")
    return resolved


def _plugin_manager(plugins: Iterable[Any], entry_points: bool) -> pluggy.PluginManager:
    return make_plugin_manager(autoload=entry_points, extra_plugins=list(plugins))


__all__ = [
    "AwaitingAnswers",
    "AwaitingDevice",
    "EvalResult",
    "NoUsableAnswer",
    "Paused",
    "RunResult",
    "SettingsError",
    "evaluate",
    "executing",
    "optimize",
    "replay",
    "replay_settings",
    "resume",
    "run",
    "session",
    "settings",
]
