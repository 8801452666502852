"""The Session: plugin manager, resolved configuration, registries and the selected plugins."""

from __future__ import annotations

import platform
import sys
from importlib import metadata
from typing import Any

import attrs
import pluggy
import structlog

from hiera_core import protocols
from hiera_core.config import ConfigError, HieraConfig, ResolvedConfig, RunConfig
from hiera_core.context import RunContext
from hiera_core.pipeline import Pipeline, pipeline_for
from hiera_core.plugins import KINDS, Registry, UnknownName, collect, direction_knowledge, run_defaults
from hiera_core.protocols import (
    PLUGIN_KINDS,
    Architecture,
    Direction,
    Evaluator,
    Executor,
    ImplementationSpace,
    LLMBackend,
    Workload,
)
from hiera_core.records import Task
from hiera_judge import sandbox

log = structlog.get_logger(__name__)

TABLE_KIND = {kind.table: kind.name for kind in PLUGIN_KINDS if kind.table}
"""Config table -> registry kind."""


@attrs.define
class Session:
    """Everything a run needs, built once and passed explicitly; nothing global."""

    pm: pluggy.PluginManager
    config: ResolvedConfig
    """The configuration resolved once: the run's choices made, the architecture chosen, every plugin's config, the
    versions."""
    registries: dict[str, Registry]
    workload: Workload
    task: Task
    arch: Architecture
    backend: LLMBackend
    executor: Executor
    evaluators: list[Evaluator]
    directions: dict[str, Direction]
    spaces: list[ImplementationSpace]
    """Ordered by rank, most controlled first."""
    context: RunContext
    """What backends and observers read about the run."""
    notices: list[str] = attrs.field(factory=list)
    """One-line messages for the user (e.g. the architecture chosen by `auto`)."""
    pipeline: Pipeline = attrs.field(init=False)
    """What evaluates a candidate: the architecture's stages, and how to rebuild them in another process."""

    @classmethod
    def create(
        cls,
        config: HieraConfig,
        pm: pluggy.PluginManager,
        *,
        device: bool = True,
        recorded_hardware: dict[str, Any] | None = None,
    ) -> Session:
        """`device=False`: the session only builds (`hiera eval --compile-only`) or plans (a run resumed on a machine
        without its device), so an architecture whose device is missing is accepted; its build stages say what else
        is missing. `recorded_hardware`: the hardware a resumed run recorded, which the prompts then describe."""
        registries = {kind: collect(pm, kind) for kind in KINDS}
        plugin_configs = _structure_plugin_tables(config, registries)
        run = _with_defaults(config.run, run_defaults(pm), registries)
        notices: list[str] = []

        def build(table: str, name: str, *extra: Any) -> Any:
            plugin_cls = registries[TABLE_KIND[table]].get(name)
            return plugin_cls(plugin_configs[table][name], *extra)

        workload = build("workload", run.workload)
        arch_name = run.arch
        if arch_name == "auto":
            arch_name, notice = _auto_arch(registries["architectures"], plugin_configs["arch"])
            if notice:
                notices.append(notice)
        arch = build("arch", arch_name)
        run = attrs.evolve(run, arch=arch_name)
        resolved = ResolvedConfig(run=run, plugins=plugin_configs, versions=_versions(pm), source=config.source)
        reason = arch.unavailable_reason() if device else None
        if reason:
            raise DeviceMissing(f"architecture '{arch_name}' cannot run here: {reason}")
        notices += [f"sandbox: {line}" for line in sandbox.protection().missing]
        tasks = workload.tasks()
        if not tasks:
            raise ConfigError(f"workload '{run.workload}' offers no task with this configuration")
        if run.task:
            by_name = {t.name: t for t in tasks}
            by_id = [t for t in tasks if t.name.startswith(f"{run.task}_")]  # KernelBench's `31` for 31_Conv2d_...
            if run.task not in by_name and len(by_id) != 1:
                raise UnknownName("task", run.task, by_name)
            task = by_name.get(run.task) or by_id[0]
        else:
            task = tasks[0]
        kind = protocols.optional(arch, "kind") or arch_name
        evaluators = sorted(
            (build("evaluator", name) for name, c in registries["evaluators"].classes.items() if c.arch == kind),
            key=lambda e: e.order,
        )
        if not evaluators:
            raise ConfigError(f"no evaluator serves architecture '{arch_name}' (candidates of kind '{kind}')")
        spaces = sorted((build("space", n) for n in registries["spaces"].names()), key=lambda s: s.rank)
        if run.space != "adaptive" and run.space not in {s.name for s in spaces}:
            raise UnknownName("space", run.space, ["adaptive", *(s.name for s in spaces)])
        _check_search(run, registries)
        directions = {
            n: build("direction", n)
            for n in sorted(
                registries["directions"].names(), key=lambda n: (protocols.optional(registries["directions"].get(n), "order"), n)
            )
        }
        context = RunContext(
            run=run,
            workload=workload,
            task=task,
            arch=arch_name,
            kind=kind,
            spaces=tuple(spaces),
            directions=directions,
            notices=tuple(notices),
            knowledge=direction_knowledge(pm, directions, kind),
            hardware=_hardware_text(arch, device, recorded_hardware),
            space_rules=_space_rules(arch, spaces),
        )
        session = cls(
            pm=pm,
            config=resolved,
            registries=registries,
            workload=workload,
            task=task,
            arch=arch,
            backend=build("backend", run.backend, context),
            executor=build("executor", run.executor),
            evaluators=evaluators,
            directions=directions,
            spaces=spaces,
            context=context,
            notices=notices,
        )
        session.pipeline = pipeline_for(resolved, pm, arch, evaluators)
        return session

    @property
    def arch_name(self) -> str:
        return self.arch.name

    @property
    def arch_kind(self) -> str:
        """The kind of candidate the architecture runs (`Architecture.kind`): what workloads and evaluators serve."""
        return self.context.kind

    def space(self, name: str) -> ImplementationSpace:
        return self.context.space(name)

    def allowed_spaces(self) -> list[str]:
        """The spaces planning may choose this run: all, or the one fixed by `--space`."""
        if self.config.run.space == "adaptive":
            return [s.name for s in self.spaces]
        return [self.config.run.space]


def _versions(pm: pluggy.PluginManager) -> dict[str, str]:
    versions = {"python": platform.python_version(), "platform": sys.platform}
    for _, dist in pm.list_plugin_distinfo():
        versions[dist.project_name] = dist.version
    try:
        versions.setdefault("hiera", metadata.version("hiera"))
    except metadata.PackageNotFoundError:
        pass
    return versions


def _hardware_text(arch: Architecture, device: bool, recorded: dict[str, Any] | None = None) -> str:
    """What the prompts say of the hardware: the architecture's own account of `hardware()` (or of the hardware a
    run `recorded`, where the device is missing), else the dict listed; nothing of a device neither seen nor recorded."""
    describe = protocols.optional(arch, "describe_hardware")
    if not device and recorded:
        return describe(recorded) if describe is not None else "; ".join(f"{key}: {value}" for key, value in recorded.items())
    if describe is not None:
        return describe()
    return "; ".join(f"{key}: {value}" for key, value in arch.hardware().items()) if device else ""


class DeviceMissing(ConfigError):
    """The architecture's device is not on this machine (`Architecture.unavailable_reason`)."""


def _space_rules(arch: Architecture, spaces: list[ImplementationSpace]) -> dict[str, str]:
    """What each space admits on this architecture: its account by rank, else the space's own description."""
    describe = protocols.optional(arch, "describe_space")
    return {space.name: describe(space.rank) if describe else space.description for space in spaces}


def _structure_plugin_tables(config: HieraConfig, registries: dict[str, Registry]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    prefix = "" if config.source == "defaults" else f"{config.source}: "
    for table, kind in TABLE_KIND.items():
        registry = registries[kind]
        raw = config.plugin_tables.get(table, {})
        for name in raw:
            if name not in registry.classes:
                raise ConfigError(
                    f"{prefix}[{table}.{name}]: no {table} named '{name}' (known: {', '.join(registry.names()) or 'none'})"
                )
        out[table] = {}
        for name, plugin_cls in registry.classes.items():
            out[table][name] = protocols.plugin_config(plugin_cls, raw.get(name), where=f"{prefix}[{table}.{name}]")
    return out


def _with_defaults(run: RunConfig, defaults: dict[str, str], registries: dict[str, Registry]) -> RunConfig:
    """`run` with every plugin choice it leaves empty taken from the plugins' defaults."""
    kinds = {kind.run_key: kind.name for kind in PLUGIN_KINDS if kind.run_key}
    chosen: dict[str, Any] = {}
    for key, kind in kinds.items():
        if getattr(run, key):
            continue
        if key not in defaults:
            raise ConfigError(
                f"no {key} given, and no installed plugin is the default one"
                f" (choose with --{key}: {', '.join(registries[kind].names()) or 'none installed'})"
            )
        chosen[key] = defaults[key]
    return attrs.evolve(run, **chosen)


def _check_search(run: RunConfig, registries: dict[str, Registry]) -> None:
    """The search strategy exists, can be answered by the backend, and plans if planning is switched off."""
    search = registries["searches"].get(run.strategy)
    backend = registries["backends"].get(run.backend)
    if not run.planning and not search.plans:
        raise ConfigError(f"--no-planning is an ablation of a search that plans; '{run.strategy}' plans its own way")
    answers = protocols.optional(backend, "searches")
    if answers is not None and run.strategy not in answers:
        raise ConfigError(
            f"the '{run.strategy}' search needs a backend that answers it: '{run.backend}' answers only"
            f" {', '.join(answers)} (use a model backend)"
        )
    if search.plans and not registries["directions"].names():
        raise ConfigError(
            f"the '{run.strategy}' search plans by direction, and no direction plugin is installed or enabled"
            " (see HIERA_DISABLE_PLUGINS)"
        )


def _auto_arch(registry: Registry, configs: dict[str, Any]) -> tuple[str, str | None]:
    """The architecture of highest `preference` that can run here, and a line saying what was passed over."""
    passed: list[str] = []
    for name in sorted(registry.names(), key=lambda n: -protocols.optional(registry.get(n), "preference")):
        reason = registry.get(name)(configs[name]).unavailable_reason()
        if reason is None:
            notice = "; ".join(passed)
            return name, f"{notice}: running on the '{name}' architecture" if notice else None
        passed.append(f"'{name}' cannot run here ({reason})")
    raise ConfigError(f"no installed architecture can run here: {'; '.join(passed) or 'none installed'}")
