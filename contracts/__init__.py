"""Executable contracts: checks that a plugin honours hiera's protocols (a kit for plugin authors)."""

from hiera_contracts.conformance import check_plugins, conformance_problems

__all__ = ["check_plugins", "conformance_problems"]
