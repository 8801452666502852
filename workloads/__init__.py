"""Built-in workloads; each subpackage is one plugin."""
