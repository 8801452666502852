"""Configuration: one TOML file, environment variables and the command line, in that rising order.

The file is `hiera.toml`, else the `[tool.hiera]` table of `pyproject.toml`, found in the working
directory (first found wins, no merging). It has a `[run]` table (`RunConfig`) and one table per
plugin kind holding a table per plugin: `[workload.stencil2d]`, `[arch.host]`, `[backend.expert]`,
`[evaluator.host-run]`, `[executor.local]`. Each plugin table is structured into that plugin's
`config_class`; unknown keys are errors. `HIERA_<KEY>` sets a `[run]` key, `--set a.b.c=VALUE` any key.
Secrets never live here: plugins read them from the environment by variable name.
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import cattrs

from hiera_core.errors import HieraError

PLUGIN_TABLES = ("workload", "arch", "backend", "evaluator", "executor", "direction", "space")
"""Top-level tables that hold one sub-table per plugin, and the registry kind each configures."""


class ConfigError(HieraError, ValueError):
    """The configuration is malformed; the message names the file, the key and the reason."""


@attrs.frozen(kw_only=True)
class RunConfig:
    """The `[run]` table: what to optimize, where, and with which budget."""

    workload: str = ""
    """Workload name (`hiera plugins` lists them); empty: the one a plugin gives as the default."""
    task: str = ""
    """Task name within the workload; empty means the workload's first task."""
    arch: str = "auto"
    """Architecture: `host`, `cuda`, ... or `auto` (cuda where a GPU is usable, else host)."""
    rounds: int = 3
    """R: planning rounds after the initial candidate."""
    population: int = 6
    """K: candidates generated per round. The budget is B = rounds x population."""
    parents: int = 2
    """How many of the best valid candidates the next round may derive from."""
    space: str = "adaptive"
    """`adaptive` (re-decided every round) or the name of one space, fixed for the run."""
    planning: bool = True
    """False is the paper's `--no-planning` ablation: no space decision or strategy, one generic prompt."""
    contract: bool = True
    """False is the paper's `--no-contract` ablation: the model writes the binding as well as the kernels."""
    strategy: str = ""
    """The search strategy (`hiera plugins` lists them); empty: the default a plugin gives (HIERA's own)."""
    backend: str = ""
    """LLM backend answering the agents; empty: the default a plugin gives (the model-free expert)."""
    executor: str = ""
    """Where evaluation runs; empty: the default a plugin gives (this machine)."""
    run_dir: str = ""
    """Run directory; empty means `runs/<run id>` under the working directory."""
    remeasure: bool = True
    """At the end of the run, measure the `finalists` best candidates again, `remeasure_passes` times each, every
    time in a fresh process on fresh inputs, the finalists interleaved; the winner and its figure come from these
    measurements (the search's own figures chose the finalists, so the fastest of them flatters)."""
    finalists: int = 3
    remeasure_passes: int = 2
    baselines: bool = True
    """Measure the workload's baselines (cuDNN called directly, ...) beside the initial candidate, in its batch."""
    baseline_cache: str = "~/.cache/hiera/baselines"
    """Where measured baselines are kept for later runs of the same task on the same machine, toolchain, versions
    and evaluator settings, which take them from there (`hiera_core.baseline_cache`); empty: measured in every run."""
    floor_margin: float = 0.9
    """A latency below this fraction of the task's roofline floor is rejected as impossible (the margin covers
    the floor's own measurement error: peaks measured on this machine)."""
    max_speedup: float = 1000.0
    """A speedup over the task's reference beyond this is rejected as implausible."""

    def __attrs_post_init__(self) -> None:
        if self.rounds < 0 or min(self.population, self.parents, self.finalists, self.remeasure_passes) < 1:
            raise ConfigError("run: rounds must be >= 0; population, parents, finalists and remeasure_passes >= 1")
        if not 0 < self.floor_margin <= 1 or self.max_speedup <= 1:
            raise ConfigError("run: floor_margin must be in (0, 1] and max_speedup above 1")


@attrs.frozen(kw_only=True)
class HieraConfig:
    """Everything configured, before plugin tables are structured into their classes."""

    run: RunConfig
    plugin_tables: dict[str, dict[str, dict[str, Any]]]
    """kind -> plugin name -> raw table."""
    source: str
    """Where the file part came from (path, or `defaults`)."""


@attrs.frozen(kw_only=True)
class ResolvedConfig:
    """A run's configuration resolved once, by `Session.create`, and read from there by everything after it: the engine,
    the pipeline's recipe, the manifest and `hiera config show`."""

    run: RunConfig
    """Every plugin choice made (a plugin's default where the settings left it empty); `arch` is the architecture chosen,
    never `auto`."""
    plugins: dict[str, dict[str, Any]]
    """table -> plugin name -> the plugin's structured config (None for a plugin without one), every plugin installed."""
    versions: dict[str, str]
    """hiera, Python, the platform and each plugin distribution with its version."""
    source: str
    """Where the file part came from (`HieraConfig.source`)."""

    def table(self) -> dict[str, Any]:
        """In the configuration file's shape, secrets never in it: the manifest's `config`, the pipeline's recipe,
        `hiera config show`; `config_from_table` reads it back."""
        out: dict[str, Any] = {"run": unstructure(self.run)}
        for table, configs in self.plugins.items():
            section = {name: unstructure(c) for name, c in sorted(configs.items()) if c is not None}
            if section:
                out[table] = section
        return out


def find_config_file(directory: Path) -> tuple[Path, dict[str, Any]] | None:
    """Return the config file in force in `directory` and its hiera table, or None."""
    hiera_toml = directory / "hiera.toml"
    if hiera_toml.is_file():
        return hiera_toml, _read_toml(hiera_toml)
    pyproject = directory / "pyproject.toml"
    if pyproject.is_file():
        table = _read_toml(pyproject).get("tool", {}).get("hiera")
        if table is not None:
            return pyproject, table
    return None


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from exc


def parse_override(text: str) -> tuple[list[str], Any]:
    """Parse `a.b.c=VALUE` (VALUE in TOML syntax, or a bare string) into (key path, value)."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--set {text!r}: expected KEY=VALUE, e.g. workload.stencil2d.n=512")
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    return key.strip().split("."), value


def load_config(
    directory: Path,
    *,
    cli: Mapping[str, Any] | None = None,
    overrides: list[str] = (),  # type: ignore[assignment]
    environ: Mapping[str, str] | None = None,
    config_file: Path | None = None,
) -> HieraConfig:
    """Resolve the configuration: CLI > environment > file > defaults.

    `cli` holds `[run]` keys given on the command line (None values are ignored); `overrides` are
    `--set` strings; `config_file` replaces the search in `directory`.
    """
    environ = os.environ if environ is None else environ
    if config_file is not None:
        if not config_file.is_file():
            raise ConfigError(f"{config_file}: no such config file")
        found: tuple[Path, dict[str, Any]] | None = (config_file, _read_toml(config_file))
    else:
        found = find_config_file(directory)
    path, table = found if found else (None, {})
    return config_from_table(table, source=str(path) if path else "defaults", cli=cli, overrides=overrides, environ=environ)


def config_from_table(
    table: Mapping[str, Any],
    *,
    source: str,
    cli: Mapping[str, Any] | None = None,
    overrides: list[str] = (),  # type: ignore[assignment]
    environ: Mapping[str, str] | None = None,
) -> HieraConfig:
    """Resolve a hiera table (from a file, or a run's manifest) with environment and CLI on top."""
    environ = {} if environ is None else environ
    table = {k: (dict(v) if isinstance(v, dict) else v) for k, v in table.items()}
    for key_path, value in map(parse_override, overrides):
        node = table
        for part in key_path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"--set {'.'.join(key_path)}: '{part}' is not a table")
        node[key_path[-1]] = value

    unknown = set(table) - {"run", *PLUGIN_TABLES}
    if unknown:
        raise ConfigError(f"{source}: unknown table(s) {', '.join(sorted(unknown))} (known: run, {', '.join(PLUGIN_TABLES)})")
    run_table = dict(table.get("run", {}))
    for name, field in attrs.fields_dict(RunConfig).items():
        env_value = environ.get(f"HIERA_{name.upper()}")
        if env_value is not None:
            run_table[name] = _coerce(env_value, field.type, f"environment variable HIERA_{name.upper()}")
    for name, value in (cli or {}).items():
        if value is not None:
            run_table[name] = value
    run = structure(run_table, RunConfig, where="[run]" if source == "defaults" else f"{source}: [run]")

    plugin_tables: dict[str, dict[str, dict[str, Any]]] = {}
    for kind in PLUGIN_TABLES:
        kind_table = table.get(kind, {})
        if not isinstance(kind_table, dict) or any(not isinstance(v, dict) for v in kind_table.values()):
            raise ConfigError(f"{source}: [{kind}] must hold one table per plugin, e.g. [{kind}.NAME]")
        plugin_tables[kind] = {name: dict(v) for name, v in kind_table.items()}
    return HieraConfig(run=run, plugin_tables=plugin_tables, source=source)


def _coerce(text: str, type_: Any, where: str) -> Any:
    if type_ in (bool, "bool"):
        if text.lower() in ("1", "true", "yes", "on"):
            return True
        if text.lower() in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{where}: expected a boolean, got {text!r}")
    if type_ in (int, "int"):
        try:
            return int(text)
        except ValueError:
            raise ConfigError(f"{where}: expected an integer, got {text!r}") from None
    if type_ in (float, "float"):
        try:
            return float(text)
        except ValueError:
            raise ConfigError(f"{where}: expected a number, got {text!r}") from None
    return text


_converter = cattrs.Converter(forbid_extra_keys=True)

_TOML_TYPES = (
    (bool, "a boolean"),
    (int, "an integer"),
    (float, "a float"),
    (str, "a string"),
    (list, "an array"),
    (dict, "a table"),
)


def _strict(kind: type, accepted: tuple[type, ...], expected: str):
    """A structure hook that takes only values of the `accepted` TOML types (a bool is never a number)."""

    def hook(value: Any, _: type) -> Any:
        if not isinstance(value, accepted) or (isinstance(value, bool) and kind is not bool):
            given = next((name for t, name in _TOML_TYPES if isinstance(value, t)), type(value).__name__)
            raise ConfigError(f"expected {expected}, got {json.dumps(value, default=str)} ({given})")
        return kind(value)

    return hook


_converter.register_structure_hook(bool, _strict(bool, (bool,), "a boolean (true or false)"))
_converter.register_structure_hook(int, _strict(int, (int,), "an integer"))
_converter.register_structure_hook(float, _strict(float, (int, float), "a number"))
_converter.register_structure_hook(str, _strict(str, (str,), "a string"))


def structure(table: Mapping[str, Any], cls: type, *, where: str) -> Any:
    """Structure a TOML table into an attrs config class; any problem becomes one ConfigError."""
    try:
        return _converter.structure(dict(table), cls)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    except (cattrs.ClassValidationError, cattrs.ForbiddenExtraKeysError) as exc:
        reasons = []
        for line in cattrs.transform_error(exc, path="", format_exception=_format_exception):
            text, _, path = line.rpartition(" @ ")
            reasons.append(f"{path.lstrip('.')}: {text}" if path.lstrip(".") else text)
        raise ConfigError(f"{where}: {'; '.join(reasons)}") from None
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _format_exception(exc: BaseException, type_: Any) -> str:
    if isinstance(exc, (ConfigError, ValueError)) and not isinstance(exc, cattrs.BaseValidationError):
        return str(exc)
    return cattrs.v.format_exception(exc, type_)


def unstructure(config: Any) -> Any:
    return _converter.unstructure(config)
