"""The `hiera` command. `hiera --workload W` is shorthand for `hiera run --workload W`."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

import attrs
import structlog
from rich.console import Console
from rich.markup import escape

from hiera_core import __version__, api, hookimpl, protocols
from hiera_core.config import PLUGIN_TABLES, HieraConfig
from hiera_core.errors import HieraError
from hiera_core.logging import configure_logging
from hiera_core.plugins import PluginError, collect, describe_plugins, make_plugin_manager
from hiera_core.protocols import StagePassed
from hiera_core.records import Evaluation, Measured, RunFinished
from hiera_core.report import write_report
from hiera_core.serialization import to_dict
from hiera_core.session import DeviceMissing
from hiera_core.store import MANIFEST, RunStore, new_run_id
from hiera_core.suite import find_runs, write_suite_report

log = structlog.get_logger(__name__)


EXIT_PAUSED = 75
"""A run paused to wait for answers or for its device (`api.Paused`): sysexits' EX_TEMPFAIL, "try again later"."""


class UsageError(HieraError):
    """Bad input on the command line: one line to the user, exit code 2."""


def _parser(pm) -> tuple[argparse.ArgumentParser, list[str]]:
    """The command line: hiera's own commands, then those the installed plugins add; and the command names."""
    parser = argparse.ArgumentParser(prog="hiera", description="Workload-aware planning for kernel optimization.")
    parser.add_argument("--version", action="version", version=f"hiera {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    run = commands.add_parser("run", help="optimize one task (the default command)")
    run.add_argument("--workload", help="workload name (see `hiera plugins`)")
    run.add_argument("--task", help="task name within the workload (default: its first task)")
    run.add_argument(
        "--arch", help="an architecture (see `hiera plugins`), or auto (default): the preferred one that can run here"
    )
    run.add_argument("--rounds", type=int, help="R: planning rounds after the initial candidate")
    run.add_argument("--population", type=int, help="K: candidates per round")
    run.add_argument("--parents", type=int, help="best valid candidates kept as parents")
    run.add_argument(
        "--space", help="adaptive (default: re-decided every round), or one space for the whole run (see `hiera plugins`)"
    )
    run.add_argument("--no-planning", dest="planning", action="store_const", const=False, help="the paper's ablation")
    run.add_argument(
        "--no-contract",
        dest="contract",
        action="store_const",
        const=False,
        help="the paper's ablation: the model writes the binding too",
    )
    run.add_argument("--backend", help="LLM backend (see `hiera plugins`; default: the model-free one a plugin gives)")
    run.add_argument("--model", help="the backend's model (sets backend.BACKEND.model)")
    run.add_argument("--base-url", help="the backend's endpoint (sets backend.BACKEND.base_url)")
    run.add_argument("--strategy", help="search strategy (see `hiera plugins`; default: HIERA's own loop)")
    run.add_argument(
        "--replay",
        type=Path,
        metavar="RUN_DIR",
        help="answer every agent request from RUN_DIR's recorded answers: that run again, offline",
    )
    run.add_argument("--run-dir", help="run directory (default: runs/<id>)")
    run.add_argument("--no-remeasure", dest="remeasure", action="store_const", const=False)
    run.add_argument(
        "--all-tasks",
        action="store_true",
        help="run every task the workload offers, each into RUN_DIR/<task>; run again to skip the "
        "finished ones and resume the rest; ends with RUN_DIR/suite.md",
    )
    common_options(run)

    resume = commands.add_parser("resume", help="continue a killed run; nothing recorded is redone")
    resume.add_argument("run_dir", type=Path)
    common_options(resume, config=False)

    evaluate = commands.add_parser("eval", help="evaluate one hand-written candidate and print its record")
    evaluate.add_argument("file", type=Path, help="the candidate source (e.g. cuda_source.cu)")
    evaluate.add_argument("--workload", help="workload name")
    evaluate.add_argument("--task", help="task name within the workload")
    evaluate.add_argument("--arch", help="an architecture (see `hiera plugins`), or auto (default)")
    evaluate.add_argument("--space", help="the space the candidate is checked against (default: the widest)")
    evaluate.add_argument("--out", type=Path, help="where its build and logs go (default: a temporary folder)")
    evaluate.add_argument(
        "--compile-only",
        action="store_true",
        help="only the checks and the build, no device needed (e.g. --arch cuda without a GPU)",
    )
    common_options(evaluate)

    report = commands.add_parser(
        "report", help="write and print a run's report; for several runs (or folders of them) the suite report"
    )
    report.add_argument("run_dirs", type=Path, nargs="+", metavar="RUN_DIR")
    report.add_argument("--out", type=Path, help="where a suite report goes (default: the one folder given, else ./suite)")

    plugins = commands.add_parser("plugins", help="list installed plugins and what they provide")
    common_options(plugins, config=False)

    config = commands.add_parser("config", help="configuration")
    config.add_argument("action", choices=["show"])
    common_options(config)

    contracts = commands.add_parser("contracts", help="write every task's contract files (and seed) to DIR/<task>/")
    contracts.add_argument("--workload", required=True, help="workload name")
    contracts.add_argument("--arch", required=True, help="the architecture whose contracts are written")
    contracts.add_argument("--out", type=Path, required=True, metavar="DIR")
    common_options(contracts)

    handlers = {
        "run": _run,
        "resume": _resume,
        "report": _report,
        "plugins": _plugins,
        "config": _config_show,
        "eval": _eval,
        "contracts": _contracts,
    }
    for name, handler in handlers.items():
        commands.choices[name].set_defaults(handler=handler)
    pm.hook.hiera_register_commands(commands=commands)
    return parser, list(commands.choices)


def common_options(parser: argparse.ArgumentParser, *, config: bool = True) -> None:
    """The options every command takes (`--config`, `--set` unless `config=False`; `--plugin`, `--log-level`):
    for a plugin's own command too."""
    if config:
        parser.add_argument("--config", type=Path, help="config file (default: ./hiera.toml or [tool.hiera] in ./pyproject.toml)")
        parser.add_argument(
            "--set",
            dest="overrides",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="set any config key, e.g. workload.stencil2d.host_n=512 (repeatable)",
        )
    parser.add_argument(
        "--plugin",
        dest="plugins",
        action="append",
        default=[],
        metavar="MODULE",
        help="also load this module as a plugin (repeatable)",
    )
    parser.add_argument("--log-level", default="warning", help="console log level (JSON logs get everything)")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        parser, names = _parser(make_plugin_manager())
    except PluginError as exc:
        print(f"hiera: error: {exc}", file=sys.stderr)
        return 2
    if not argv or (argv[0] not in names and argv[0] not in ("-h", "--help", "--version")):
        argv.insert(0, "run")
    args = parser.parse_args(argv)
    console = Console(highlight=False, soft_wrap=True)
    try:
        with _stoppable():
            return args.handler(args, console)
    except api.Paused as exc:
        print(f"hiera: {exc}", file=sys.stderr)
        return EXIT_PAUSED
    except api.NoUsableAnswer as exc:
        console.print(f"report: {exc.result.run_dir / 'report.md'}", markup=False)
        print(f"hiera: error: {exc}", file=sys.stderr)
        return 1
    except HieraError as exc:  # UsageError, ConfigError, UnknownName, PluginError, RunDirError, BackendError, ExecutorError
        print(f"hiera: error: {exc}", file=sys.stderr)
        return 2
    except Terminated:
        print("hiera: stopped (SIGTERM); `hiera resume RUN_DIR` continues the run", file=sys.stderr)
        return 128 + signal.SIGTERM
    except KeyboardInterrupt:
        print("hiera: interrupted; `hiera resume RUN_DIR` continues the run", file=sys.stderr)
        return 130


class Terminated(KeyboardInterrupt):
    """SIGTERM: a stop as Ctrl-C's (what finished is recorded, `hiera resume` goes on)."""


def _terminate(signum: int, frame: Any) -> None:
    raise Terminated()


@contextlib.contextmanager
def _stoppable():
    """SIGINT (Ctrl-C, `timeout -s INT`) and SIGTERM (`timeout`'s default, a batch system's time limit) stop a command
    as Ctrl-C does, whatever hiera's parent left them: a script without job control starts its background commands
    with SIGINT ignored (POSIX), and a GPU suite started so went on past its SIGINT to its kill (2026-12-07). The
    handlers before are put back after the command (a program that calls `main` keeps its own)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _terminate)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            if handler is not None:  # None: set outside Python, which cannot be put back
                signal.signal(signum, handler)


def _settings(args: argparse.Namespace, **run: Any) -> HieraConfig:
    """The settings in force for a command: its `[run]` keys over `--set`, HIERA_* and the config file."""
    if args.config is not None:
        return api.settings(config_file=args.config, environ=os.environ, sets=args.overrides, **run)
    return api.settings(config_dir=Path.cwd(), environ=os.environ, sets=args.overrides, **run)


def _cli_run_keys(args: argparse.Namespace) -> dict[str, Any]:
    keys = (
        "workload",
        "task",
        "arch",
        "rounds",
        "population",
        "parents",
        "space",
        "planning",
        "contract",
        "strategy",
        "backend",
        "run_dir",
        "remeasure",
    )
    return {k: getattr(args, k) for k in keys}


def _run(args: argparse.Namespace, console: Console) -> int:
    if args.replay is not None:
        config = _replay_config(args)
    else:
        config = _settings(args, **_cli_run_keys(args))
        if args.model or args.base_url:
            backend = config.run.backend
            if not backend:
                raise UsageError("--model and --base-url set a backend's options: name the backend (--backend NAME)")
            options = {"model": args.model, "base_url": args.base_url}
            args.overrides = [
                *args.overrides,
                *(f"backend.{backend}.{key}={json.dumps(value)}" for key, value in options.items() if value),
            ]
            config = _settings(args, **_cli_run_keys(args))
    if args.all_tasks:
        return _run_all_tasks(config, args, console)
    return _summary(api.run(config, plugins=[*args.plugins, Progress(console, args.log_level)]), console)


def _run_all_tasks(config: HieraConfig, args: argparse.Namespace, console: Console) -> int:
    """Every task of the workload, one run directory each under the suite folder, as many at once as the executor
    can keep busy (`Executor.concurrent_runs`; one after another without it); a task that fails or pauses (its
    backend answers later) is reported in one line and the batch goes on: so a paused batch posts every task's
    requests at once, and exits with EXIT_PAUSED unless a task failed."""
    if config.run.task:
        raise UsageError("--all-tasks runs every task of the workload; drop --task (or select tasks in its config)")
    root = Path(config.run.run_dir or Path("runs") / new_run_id())
    try:
        session = api.session(config, plugins=args.plugins)
    except DeviceMissing:
        if not root.is_dir():
            raise
        session = api.session(config, plugins=args.plugins, device=False)  # resumed where only planning can go on
    failed = dict((protocols.optional(session.workload, "failures") or dict)())
    paused: list[str] = []
    tasks = _furthest_behind_first(session.workload.tasks(), root)
    with api.executing(session):  # one cluster (or pool) for the whole suite
        concurrent = protocols.optional(session.executor, "concurrent_runs")
        at_once = min(len(tasks), concurrent(session.pipeline) if concurrent else 1)
        console.print(
            f"{len(tasks)} task(s) of {session.workload.name} → {root}" + (f", {at_once} at once" if at_once > 1 else ""),
            markup=False,
        )
        if at_once > 1:
            root.mkdir(parents=True, exist_ok=True)
            configure_logging(json_file=root / "hiera.log.jsonl", console=sys.stderr, level=args.log_level)

        def one(task) -> None:
            path = root / task.name
            prefix = f"{task.name}: " if at_once > 1 else ""
            plugins = [*args.plugins, Progress(console, args.log_level, prefix=prefix, configure=at_once == 1)]
            try:
                if (path / MANIFEST).is_file():
                    if any(isinstance(e, RunFinished) for e in RunStore.open(path).events):
                        console.print(f"{task.name}: finished earlier, skipped", markup=False)
                        return
                    _summary(api.resume(path, plugins=plugins), console, prefix)
                else:
                    run = attrs.evolve(config.run, task=task.name, run_dir=str(path))
                    _summary(api.run(attrs.evolve(config, run=run), plugins=plugins), console, prefix)
            except api.Paused as exc:
                paused.append(task.name)
                console.print(f"{task.name}: {exc}", markup=False)
            except Exception as exc:
                if not isinstance(exc, HieraError):  # hiera's own fault, not a stated reason: its backtrace to the log
                    log.exception("suite_task_failed", task=task.name)
                failed[task.name] = f"{type(exc).__name__}: {exc}".splitlines()[0]
                console.print(f"{task.name}: failed: {failed[task.name]}", markup=False)

        if at_once == 1:
            for task in tasks:
                one(task)
        else:
            _concurrently(one, tasks, at_once, session.executor)
    for label, reason in failed.items():
        console.print(f"{label}: {reason}", markup=False)
    runs = [p for p in sorted(root.iterdir()) if (p / MANIFEST).is_file()] if root.is_dir() else []
    if runs:
        console.print(f"suite report: {write_suite_report(runs, root)}", markup=False)
    if paused and not failed:
        print(
            f"hiera: {len(paused)} task(s) paused, for answers or for the device; answer what waits, then run the same"
            " command again (where the device is, for those that wait for it)",
            file=sys.stderr,
        )
        return EXIT_PAUSED
    return 1 if failed or not runs else 0


def _furthest_behind_first(tasks: list, root: Path) -> list:
    """The tasks in the order a suite takes them: the fewest candidates evaluated first, the workload's order among
    equals. A suite resumed in calls that a time limit cuts (a GPU machine's) then moves the tasks furthest behind
    each time, not the same first ones (KernelBench on an H100, 2026-12-07: over four calls, two tasks of ten had
    nothing evaluated past their seed and two others one or two candidates, while the first ones finished)."""

    def evaluated(task) -> int:
        path = root / task.name
        return len(RunStore.open(path).evaluated()) if (path / MANIFEST).is_file() else 0

    return sorted(tasks, key=evaluated)


def _concurrently(one, tasks: list, at_once: int, executor) -> None:
    """`one(task)` for every task, `at_once` in threads. Ctrl-C asks the executor to stop its work for every run
    (`cancel`), waits for the runs to end and goes on as an interrupt."""
    pool = ThreadPoolExecutor(max_workers=at_once, thread_name_prefix="hiera-suite")
    futures = [pool.submit(one, task) for task in tasks]
    try:
        while not all(f.done() for f in futures):
            wait(futures, timeout=0.5)
    except KeyboardInterrupt:
        for future in futures:
            future.cancel()
        if cancel := protocols.optional(executor, "cancel"):
            cancel()
        pool.shutdown(wait=True)
        raise
    pool.shutdown()


def _replay_config(args: argparse.Namespace) -> HieraConfig:
    """The recorded run's configuration, answered from its answer cache (`api.replay_settings`)."""
    if args.backend or args.model or args.base_url:
        raise UsageError("--replay answers from the recorded run; it takes no --backend, --model or --base-url")
    keys = {key: value for key, value in _cli_run_keys(args).items() if key != "backend"}
    return api.replay_settings(args.replay, plugins=args.plugins, sets=args.overrides, **keys)


def _resume(args: argparse.Namespace, console: Console) -> int:
    store = RunStore.open(args.run_dir)
    console.print(f"resuming {store.manifest.run_id}: {len(store.evaluated())} candidates already evaluated")
    return _summary(api.resume(args.run_dir, plugins=[*args.plugins, Progress(console, args.log_level)]), console)


def _summary(result: api.RunResult, console: Console, prefix: str = "") -> int:
    """The run's last lines: where its report is, what the agents cost, the best; exit code 1 without one."""
    console.print(f"{prefix}report: {result.run_dir / 'report.md'}")
    if result.costs.calls:
        console.print(f"{prefix}agents: {result.costs.describe()}")
    if result.best_evaluation is None:
        console.print(
            f"{prefix}no finalist held up in the final re-measurement (report.md, Finalists)"
            if result.finalists
            else f"{prefix}no valid candidate was found"
        )
        return 1
    best, final = result.best_evaluation, result.headline
    if final is not None and final is not best:
        line = (
            f"best {final.latency_ms:.3f} ms re-measured ({best.latency_ms:.3f} ms in the search),"
            f" {final.speedup_vs_reference:.2f}× the reference"
        )
    else:
        line = f"best {best.latency_ms:.3f} ms, {best.speedup_vs_reference:.2f}× the reference"
    seed = result.evaluations[0].evaluation
    if isinstance(seed, Measured):
        line += f", {seed.latency_ms / best.latency_ms:.2f}× the initial candidate in the search"
    console.print(prefix + line)
    return 0


class Progress:
    """The command's console: at the start of a run its notices and one line saying what runs (and the run's
    JSON log in the run directory, unless `configure` is False: runs of a suite at once share the suite's), then one
    line per plan and per evaluated candidate, with the best so far; each line after `prefix`."""

    def __init__(self, console: Console, log_level: str, *, prefix: str = "", configure: bool = True):
        self.console, self.log_level, self.budget, self.count = console, log_level, 0, 0
        self.best_ms: float | None = None
        self.prefix, self.configure = prefix, configure

    def print(self, line: str) -> None:
        self.console.print(self.prefix + line)

    @hookimpl
    def hiera_run_started(self, context, manifest, run_dir) -> None:
        if self.configure:
            configure_logging(json_file=run_dir / "hiera.log.jsonl", console=sys.stderr, level=self.log_level)
        for notice in context.notices:
            self.print(notice)
        run = context.run
        self.budget = run.rounds * run.population
        self.print(
            f"hiera {context.workload.name}/{context.task.name} on {context.arch}: {run.rounds} rounds × {run.population}"
            f" candidates, space {run.space}, strategy {run.strategy}, backend {run.backend} → {run_dir}"
        )

    @hookimpl
    def hiera_plan_made(self, plan) -> None:
        scores = " ".join(f"{d}={s:.2f}" for d, s in plan.decision.scores.items())
        self.print(
            f"[bold]round {plan.round}[/]: space {plan.decision.space}, direction {plan.decision.direction}"
            f" ({scores}), strategy {_shown(plan.strategy.name)}"
        )
        if plan.decision.exhausted:
            self.print("  every direction scored 0: nothing left to try, the search stops here")

    @hookimpl
    def hiera_candidate_evaluated(self, candidate, evaluation) -> None:
        if candidate.round > 0:
            self.count += 1
        if isinstance(evaluation, Measured):
            status = f"[green]{evaluation.latency_ms:9.3f} ms[/]"
            self.best_ms = evaluation.latency_ms if self.best_ms is None else min(self.best_ms, evaluation.latency_ms)
        else:
            reason = (getattr(evaluation, "reason", "") or "").splitlines()[:1]
            status = f"[red]{type(evaluation).__name__}[/] {_shown(reason[0][:80] if reason else '')}"
        where = "initial" if candidate.round == 0 else f"{self.count:>3}/{self.budget}"
        best = f"{self.best_ms:.3f} ms" if self.best_ms is not None else "-"
        self.print(f"  {where} {candidate.id} {status}  best {best}  [dim]{_shown(candidate.origin)}[/]")


def _shown(text: str) -> str:
    """A model's (or a compiler's) text on one console line, literally: no rich markup read in it."""
    return escape(" ".join(text.split()))


def _eval(args: argparse.Namespace, console: Console) -> int:
    if not args.file.is_file():
        raise UsageError(f"no such file: {args.file}")
    config = _settings(args, workload=args.workload, task=args.task, arch=args.arch)
    result = api.evaluate(
        args.file.read_text(), config, space=args.space, workdir=args.out, device=not args.compile_only, plugins=args.plugins
    )
    for notice in result.notices:
        console.print(notice)
    candidate, evaluation = result.candidate, result.evaluation
    console.print(f"{args.file} as {result.workload}/{result.task} on {result.arch}, space {result.space}:")
    if isinstance(evaluation, StagePassed):  # --compile-only, and every stage before the device passed
        job = evaluation.job
        console.print(f"  built ({job.compile_s:.1f} s); not run: --compile-only", markup=False)
        for kernel, used in (job.built.resources if job.built else {}).items():  # as the compiler reported them
            console.print(
                f"  {kernel}: {used.get('registers')} registers, {used.get('spill_store_bytes', 0)} bytes spilled", markup=False
            )
        console.print(
            json.dumps({"candidate": candidate.id, "compile_s": job.compile_s, "built": to_dict(job.built)}, indent=1),
            markup=False,
        )
        return 0
    if isinstance(evaluation, Measured):
        console.print(
            f"  correct; {evaluation.latency_ms:.4f} ms (p10 {evaluation.latency_p10_ms:.4f}, p90 {evaluation.latency_p90_ms:.4f},"
            f" {evaluation.repeats} calls), reference {evaluation.reference_latency_ms:.4f} ms,"
            f" speedup {evaluation.speedup_vs_reference:.2f}×"
        )
    else:
        console.print(
            f"  {type(evaluation).__name__}: {getattr(evaluation, 'reason', None) or getattr(evaluation, 'log', '')}",
            markup=False,
        )
    console.print(json.dumps({"candidate": candidate.id, "evaluation": to_dict(evaluation, Evaluation)}, indent=1), markup=False)
    return 0 if isinstance(evaluation, Measured) else 1


def _contracts(args: argparse.Namespace, console: Console) -> int:
    """Write each task's contract files (and its seed, when the workload has one) to DIR/<task>/. A workload may
    offer `failures() -> {label: reason}` for tasks it could not load; those and every task whose contract fails
    get one line each, and the exit code is 1."""
    config = _settings(args, workload=args.workload)
    workload_cls = collect(make_plugin_manager(extra_plugins=args.plugins), "workloads").get(args.workload)
    table = config.plugin_tables["workload"].get(args.workload, {})
    workload = workload_cls(protocols.plugin_config(workload_cls, table, where=f"[workload.{args.workload}]"))
    failed = dict((protocols.optional(workload, "failures") or dict)())
    written = seeded = 0
    for task in workload.tasks():
        try:
            contract = workload.contract(task, args.arch)
        except Exception as exc:  # noqa: BLE001 -- one task's failure must not stop the batch
            failed[task.name] = f"{type(exc).__name__}: {exc}"
            continue
        folder = args.out / task.name
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in contract.files.items():
            (folder / name).write_text(text)
        (folder / "interface.txt").write_text(contract.interface + "\n")
        written += 1
        try:
            source, _, _ = workload.seed(task, args.arch)
        except Exception as exc:  # noqa: BLE001 -- no seed is a note, not a failed contract
            (folder / "NO_SEED").write_text(f"{exc}\n")
            continue
        (folder / contract.source_filename).write_text(source)
        seeded += 1
    for label, reason in failed.items():
        console.print(f"{label}: {reason}", markup=False)
    console.print(f"{written} contract(s) written to {args.out} ({seeded} with a seed); {len(failed)} failed", markup=False)
    return 1 if failed else 0


def _report(args: argparse.Namespace, console: Console) -> int:
    paths = args.run_dirs
    if len(paths) == 1 and (paths[0] / MANIFEST).is_file() and args.out is None:
        path = write_report(RunStore.open(paths[0]))
    else:
        out = args.out or (paths[0] if len(paths) == 1 else Path("suite"))
        path = write_suite_report(find_runs(paths), out)
    console.print(path.read_text(), markup=False)
    return 0


def _plugins(args: argparse.Namespace, console: Console) -> int:
    pm = make_plugin_manager(extra_plugins=args.plugins)
    for info in describe_plugins(pm):
        origin = f"{info.distribution} {info.version}" if info.distribution else "registered directly"
        console.print(f"[bold]{info.name}[/]  ({origin}{'; entry point ' + info.entry_point if info.entry_point else ''})")
        for kind, names in info.provides.items():
            console.print(f"    {kind}: {', '.join(names)}")
        console.print(f"    hooks: {', '.join(info.hooks)}")
    return 0


def _config_show(args: argparse.Namespace, console: Console) -> int:
    config = _settings(args)
    session = api.session(config, plugins=args.plugins)
    console.print(f"# in force (source: {session.config.source}; CLI > environment > file > defaults)", markup=False)
    console.print(_toml(session.config.table()), markup=False)
    return 0


def _toml(table: dict[str, Any]) -> str:
    lines: list[str] = []

    def emit(prefix: str, node: dict[str, Any]) -> None:
        scalars = {k: v for k, v in node.items() if not isinstance(v, dict)}
        if scalars or not node:
            lines.append(f"[{prefix}]")
            lines.extend(f"{k} = {json.dumps(v)}" for k, v in scalars.items())
            lines.append("")
        for key, value in node.items():
            if isinstance(value, dict):
                emit(f"{prefix}.{key}", value)

    for key in ("run", *PLUGIN_TABLES):
        if key in table:
            emit(key, table[key])
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
