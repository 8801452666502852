"""Packages are found, not listed: each top-level package is an entry of pyproject.toml's
[tool.setuptools.package-dir] (its folder), and every package under that folder comes with it.
Everything else about the distribution is in pyproject.toml."""

import tomllib
from pathlib import Path

from setuptools import find_packages, setup

ROOT = Path(__file__).parent
folders = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
setup(
    packages=[f"{name}.{sub}" if sub else name for name, folder in folders.items() for sub in ["", *find_packages(ROOT / folder)]]
)
