"""`[tool.jaxlint]` in the nearest pyproject.toml: found, parsed and validated, each error naming the key and file."""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Any, Optional

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib


class ConfigError(ValueError):
    """A configuration problem, worded for the user."""


@dataclass
class Config:
    path: Optional[str] = None  # the pyproject.toml it came from
    select: Optional[list[str]] = None
    ignore: list[str] = field(default_factory=list)
    extend_select: list[str] = field(default_factory=list)
    exclude: Optional[list[str]] = None
    extend_exclude: list[str] = field(default_factory=list)
    per_file_ignores: dict[str, list[str]] = field(default_factory=dict)
    verify: Optional[bool] = None
    verify_timeout: Optional[float] = None
    verify_memory: Optional[int] = None
    extend_trace_decorators: list[str] = field(default_factory=list)
    include: Optional[list[str]] = None  # file-name globs walked for in folders (default: *.py, *.ipynb)
    extend_include: list[str] = field(default_factory=list)


_LIST_KEYS = {"select", "ignore", "extend-select", "exclude", "extend-exclude", "extend-trace-decorators",
              "include", "extend-include"}
_KEYS = _LIST_KEYS | {"per-file-ignores", "verify", "verify-timeout", "verify-memory"}


def find_pyproject(start: str) -> Optional[str]:
    """The nearest pyproject.toml at or above `start` (a file or folder)."""
    here = os.path.abspath(start)
    if not os.path.isdir(here):
        here = os.path.dirname(here)
    while True:
        candidate = os.path.join(here, "pyproject.toml")
        if os.path.isfile(candidate):
            return candidate
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent


def _str_list(value: Any, key: str, path: str) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise ConfigError(f"{path}: [tool.jaxlint] `{key}` must be a list of strings, got {value!r}.")


def load(path: Optional[str]) -> Config:
    """Read `[tool.jaxlint]` from a pyproject.toml (an empty Config when there is none)."""
    if path is None:
        return Config()
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc}).") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror}).") from None
    section = data.get("tool", {}).get("jaxlint")
    cfg = Config(path=path)
    if section is None:
        return cfg
    if not isinstance(section, dict):
        raise ConfigError(f"{path}: [tool.jaxlint] must be a table.")
    for key, value in section.items():
        if key not in _KEYS:
            known = ", ".join(sorted(_KEYS))
            raise ConfigError(f"{path}: unknown key `{key}` in [tool.jaxlint] (known keys: {known}).")
        attr = key.replace("-", "_")
        if key in _LIST_KEYS:
            setattr(cfg, attr, _str_list(value, key, path))
        elif key == "per-file-ignores":
            if not isinstance(value, dict):
                raise ConfigError(f"{path}: [tool.jaxlint] `per-file-ignores` must be a table of glob = [codes].")
            cfg.per_file_ignores = {g: _str_list(v, f"per-file-ignores.{g}", path) for g, v in value.items()}
        elif key == "verify":
            if not isinstance(value, bool):
                raise ConfigError(f"{path}: [tool.jaxlint] `verify` must be true or false, got {value!r}.")
            cfg.verify = value
        elif key == "verify-timeout":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ConfigError(f"{path}: [tool.jaxlint] `verify-timeout` must be a positive number of seconds, got {value!r}.")
            cfg.verify_timeout = float(value)
        elif key == "verify-memory":
            if isinstance(value, bool) or not isinstance(value, int) or value < 64:
                raise ConfigError(f"{path}: [tool.jaxlint] `verify-memory` must be a whole number of MiB (at least 64), got {value!r}.")
            cfg.verify_memory = value
    return cfg
