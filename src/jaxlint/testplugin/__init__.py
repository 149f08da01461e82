"""`pytest --jaxlint`: watch the lines jaxlint flags while a project's own tests run, and keep what JAX did.

This module is the `pytest11` entry point, so pytest imports it in every run of an environment where
jaxlint is installed: it only adds the option and stays inert (imports nothing heavy) unless
`--jaxlint` is given.
"""
from __future__ import annotations

from typing import Any


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("jaxlint", "jaxlint: observe flagged JAX trace hazards while the tests run")
    group.addoption("--jaxlint", action="store_true", default=False,
                    help="Run jaxlint's static pass over the project files the tests import, watch the flagged "
                         "lines while the tests run, and store verdicts for the next `jaxlint` run.")
    group.addoption("--jaxlint-path", action="append", default=[], metavar="PATH",
                    help="A file or folder to check and watch instead of the imported project files (repeatable).")


def pytest_configure(config: Any) -> None:
    if config.getoption("jaxlint", False):
        from .session import JaxlintSession

        config.pluginmanager.register(JaxlintSession(config), "jaxlint-session")
