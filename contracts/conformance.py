"""Checks every registered plugin class against its protocol; plugin authors run it in their tests:

from hiera_contracts import check_plugins
from hiera_core.plugins import make_plugin_manager

def test_my_plugin_conforms():
    check_plugins(make_plugin_manager(extra_plugins=["my_plugin"]))
"""

from __future__ import annotations

import inspect

import pluggy

from hiera_core import protocols
from hiera_core.plugins import PluginError, collect, direction_knowledge


def conformance_problems(pm: pluggy.PluginManager) -> list[str]:
    """One line per problem: a missing member, a method that is not callable, a bad class attribute, or knowledge
    of a direction on a registered architecture's kind that two plugins give, or that is not a DirectionKnowledge."""
    problems = []
    for plugin_kind in protocols.PLUGIN_KINDS:
        kind, protocol = plugin_kind.name, plugin_kind.protocol
        methods = protocol_methods(protocol)
        for name, cls in collect(pm, kind).classes.items():
            where = f"{kind[:-1]} '{name}' ({cls.__module__}.{cls.__qualname__})"
            for member in protocols_members(protocol):
                if not hasattr(cls, member):
                    problems.append(f"{where}: missing `{member}`")
                elif member in methods and not callable(value := getattr(cls, member)):
                    problems.append(f"{where}: `{member}` must be a method, not {type(value).__name__} {value!r:.60}")
            for member, spec in plugin_kind.optional.items():
                if spec.method and hasattr(cls, member) and not callable(value := getattr(cls, member)):
                    problems.append(f"{where}: `{member}` must be a method, not {type(value).__name__} {value!r:.60}")
            if not hasattr(cls, "config_class") and plugin_kind.configured:
                problems.append(f"{where}: missing `config_class` (None when it takes no configuration)")
            if kind == "directions" and len(name) != 1:
                problems.append(f"{where}: a direction's name is one letter")
            if kind == "evaluators" and not isinstance(getattr(cls, "order", None), int):
                problems.append(f"{where}: `order` must be an int")
    directions = collect(pm, "directions").names()
    for kind in sorted({protocols.optional(cls, "kind") or name for name, cls in collect(pm, "architectures").classes.items()}):
        try:  # what prompts quote of each direction on this kind: one answer at most, a DirectionKnowledge
            direction_knowledge(pm, directions, kind)
        except PluginError as exc:
            problems.append(f"knowledge of the directions on '{kind}' architectures: {exc}")
    return problems


def protocols_members(protocol: type) -> list[str]:
    return sorted(
        name
        for name in getattr(protocol, "__protocol_attrs__", None) or _annotated_and_methods(protocol)
        if not name.startswith("_")
    )


def protocol_methods(protocol: type) -> set[str]:
    """The members of `protocol` that the framework calls."""
    return {name for name, value in vars(protocol).items() if inspect.isfunction(value) and not name.startswith("_")}


def _annotated_and_methods(protocol: type) -> set[str]:
    names = set(getattr(protocol, "__annotations__", {}))
    names |= {n for n, v in vars(protocol).items() if inspect.isfunction(v)}
    return names


def check_plugins(pm: pluggy.PluginManager) -> None:
    """Raise AssertionError listing every conformance problem of the plugins `pm` has loaded."""
    problems = conformance_problems(pm)
    assert not problems, "plugin conformance problems:\n" + "\n".join(problems)
