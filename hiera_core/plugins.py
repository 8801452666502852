"""The plugin manager factory and the typed registries collected from it."""

from __future__ import annotations

import importlib
import importlib.metadata
import os
from collections.abc import Iterable
from typing import Any, cast

import attrs
import pluggy

import hiera_core.hookspecs as hookspecs
from hiera_core.errors import HieraError
from hiera_core.protocols import PLUGIN_KINDS, DirectionKnowledge

ENTRY_POINT_GROUP = "hiera"
"""The entry-point group every plugin, built-in or third-party, registers in."""

KINDS = tuple(kind.name for kind in PLUGIN_KINDS)
"""What a plugin can register, by the suffix of its `hiera_register_<kind>` hook (`protocols.PLUGIN_KINDS`)."""


class PluginError(HieraError):
    """A plugin could not be loaded, two plugins register the same name, or a plugin raised where only a bug
    raises (a backend's `answer` anything but BackendError): the run stops with this one line."""


class UnknownName(HieraError, LookupError):
    """A name (workload, arch, space, ...) that no installed plugin provides."""

    def __init__(self, kind: str, name: str, known: Iterable[str]):
        self.kind, self.name, self.known = kind, name, sorted(known)
        choices = ", ".join(self.known) or "none installed"
        super().__init__(f"unknown {kind} '{name}' (choose from: {choices})")


def make_plugin_manager(
    *, autoload: bool = True, blocked: Iterable[str] = (), extra_plugins: Iterable[Any] = ()
) -> pluggy.PluginManager:
    """Build a fresh plugin manager: core specs, entry points of group `hiera`, extra plugins.

    `blocked` names entry points (or module names) never to load; `HIERA_DISABLE_PLUGINS`
    (comma-separated) adds to it. `extra_plugins` are modules or objects registered directly
    (tests, `--plugin module`). A hook implemented without a specification fails here.
    """
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    blocked = set(blocked) | {n.strip() for n in os.environ.get("HIERA_DISABLE_PLUGINS", "").split(",") if n.strip()}
    for name in blocked:
        pm.set_blocked(name)
    pm.hook.hiera_addhooks.call_historic(kwargs={"pluginmanager": pm})
    if autoload:
        _load_entry_points(pm)
    for plugin in extra_plugins:
        if isinstance(plugin, str):
            try:
                plugin = importlib.import_module(plugin)
            except Exception as exc:
                raise PluginError(f"cannot import plugin module '{plugin}': {one_line(exc)}") from exc
        if isinstance(plugin, type):
            raise PluginError(
                f"plugin {plugin.__qualname__} is a class: register an instance ({plugin.__qualname__}()) or a module"
            )
        if not pm.is_registered(plugin):
            pm.register(plugin)
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        raise PluginError(str(exc)) from exc
    return pm


def _load_entry_points(pm: pluggy.PluginManager) -> None:
    """Register every entry point of group `hiera`, one at a time, so that one that fails is named."""
    for dist in importlib.metadata.distributions():
        for ep in dist.entry_points:
            if ep.group != ENTRY_POINT_GROUP or pm.has_plugin(ep.name) or pm.is_blocked(ep.name):
                continue
            try:
                pm.load_setuptools_entrypoints(ENTRY_POINT_GROUP, name=ep.name)
            except Exception as exc:
                raise PluginError(
                    f"plugin '{ep.name}' (entry point {ep.name} = {ep.value} of distribution {dist.name} {dist.version})"
                    f" cannot be loaded: {one_line(exc)}; HIERA_DISABLE_PLUGINS={ep.name} skips it"
                ) from exc


def one_line(exc: BaseException) -> str:
    """`Type: message (notes)` of an exception, its lines joined: how a plugin's failure is shown to the user."""
    notes = "".join(f" ({note})" for note in getattr(exc, "__notes__", ()))
    return " ".join(f"{type(exc).__name__}: {exc}{notes}".split())


@attrs.frozen(kw_only=True)
class Registry:
    """Registered classes of one kind, by name."""

    kind: str
    classes: dict[str, type[Any]]

    def get(self, name: str) -> type[Any]:
        try:
            return self.classes[name]
        except KeyError:
            raise UnknownName(self.kind.rstrip("s"), name, self.classes) from None

    def names(self) -> list[str]:
        return sorted(self.classes)


def collect(pm: pluggy.PluginManager, kind: str) -> Registry:
    """Call `hiera_register_<kind>` on every plugin; a name registered twice is an error naming both."""
    hook = getattr(pm.hook, f"hiera_register_{kind}")
    classes: dict[str, type[Any]] = {}
    for result in hook():
        for cls in result or ():
            name = getattr(cls, "name", None)
            if not isinstance(name, str) or not name:
                raise PluginError(f"{cls.__module__}.{cls.__qualname__} registered as {kind} has no `name`")
            if name in classes and classes[name] is not cls:
                other = classes[name]
                raise PluginError(
                    f"{kind.rstrip('s')} '{name}' is registered twice: by {other.__module__}.{other.__qualname__}"
                    f" and by {cls.__module__}.{cls.__qualname__}"
                )
            classes[name] = cls
    return Registry(kind=kind, classes=classes)


def run_defaults(pm: pluggy.PluginManager) -> dict[str, str]:
    """The `[run]` defaults the plugins give (`hiera_run_defaults`); a key given by two plugins is an error."""
    defaults: dict[str, tuple[str, str]] = {}
    for impl in pm.hook.hiera_run_defaults.get_hookimpls():
        given = cast(dict[str, str], impl.function() or {})
        for key, value in given.items():
            if key in defaults and defaults[key][1] != value:
                raise PluginError(
                    f"plugins '{defaults[key][0]}' and '{impl.plugin_name}' both give the default"
                    f" {key} ('{defaults[key][1]}', '{value}'): block one (HIERA_DISABLE_PLUGINS)"
                )
            defaults[key] = (impl.plugin_name, value)
    return {key: value for key, (_, value) in defaults.items()}


def direction_knowledge(pm: pluggy.PluginManager, directions: Iterable[str], kind: str) -> dict[str, DirectionKnowledge]:
    """What the plugins know of each of `directions` on architectures of `kind` (`hiera_direction_knowledge`),
    by letter. Two plugins answering for one direction are an error naming both; a direction none answers for
    gets texts saying that nothing is known of it on `kind`, and no strategies."""
    directions = list(directions)
    answers: dict[str, tuple[str, DirectionKnowledge]] = {}
    for impl in pm.hook.hiera_direction_knowledge.get_hookimpls():
        for letter in directions:
            arguments = {"direction": letter, "kind": kind}
            answer = impl.function(**{name: arguments[name] for name in impl.argnames})
            if answer is None:
                continue
            if not isinstance(answer, DirectionKnowledge):
                raise PluginError(
                    f"plugin '{impl.plugin_name}' answered hiera_direction_knowledge({letter!r}, {kind!r})"
                    f" with {type(answer).__name__}, not DirectionKnowledge"
                )
            if letter in answers:
                raise PluginError(
                    f"plugins '{answers[letter][0]}' and '{impl.plugin_name}' both give the knowledge of"
                    f" direction {letter} on '{kind}' architectures: block one (HIERA_DISABLE_PLUGINS)"
                )
            answers[letter] = (impl.plugin_name, answer)
    return {letter: answers[letter][1] if letter in answers else _unknown(letter, kind) for letter in directions}


def _unknown(letter: str, kind: str) -> DirectionKnowledge:
    return DirectionKnowledge(
        knowledge=f"- No installed plugin knows direction {letter} on '{kind}' architectures: no facts to quote.",
        rubric=f"No installed plugin gives a rubric for {letter} on '{kind}' architectures: judge it from its"
        " description and the signals it reads.",
    )


@attrs.frozen(kw_only=True)
class PluginInfo:
    """One loaded plugin, as `hiera plugins` shows it."""

    name: str
    distribution: str | None
    version: str | None
    entry_point: str | None
    hooks: list[str]
    provides: dict[str, list[str]]


def describe_plugins(pm: pluggy.PluginManager) -> list[PluginInfo]:
    """Every registered plugin with its distribution, entry point, hooks and what it registers."""
    dists = {id(plugin): dist for plugin, dist in pm.list_plugin_distinfo()}
    infos = []
    for name, plugin in pm.list_name_plugin():
        if plugin is None or plugin is hookspecs:
            continue
        dist = dists.get(id(plugin))
        entry_point = None
        if dist is not None:
            for ep in dist.entry_points:
                if ep.group == ENTRY_POINT_GROUP and ep.name == name:
                    entry_point = f"{ep.name} = {ep.value}"
        hooks = sorted(h.name for h in pm.get_hookcallers(plugin) or ())
        provides = {}
        for kind in KINDS:
            impl = getattr(plugin, f"hiera_register_{kind}", None)
            if impl is not None:
                provides[kind] = [cls.name for cls in impl() or ()]
        infos.append(
            PluginInfo(
                name=name,
                distribution=dist.project_name if dist else None,
                version=dist.version if dist else None,
                entry_point=entry_point,
                hooks=hooks,
                provides=provides,
            )
        )
    return sorted(infos, key=lambda info: info.name)
