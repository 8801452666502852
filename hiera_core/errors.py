"""The one base of every error hiera raises for input it cannot use.

A configuration, a name, a plugin, a run directory or a backend that hiera cannot use raises a subclass
(`ConfigError`, `UnknownName`, `PluginError`, `RunDirError`, `BackendError`); its message is the one line the
`hiera` command prints. A caller embedding the core catches `HieraError`.
"""


class HieraError(Exception):
    """Input hiera cannot use; the message says what and where, in one line."""
