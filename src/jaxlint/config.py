"""`[tool.jaxlint]` in the nearest pyproject.toml and `--config KEY=VALUE` overrides: parsed and validated alike,
each error naming the key and where it came from."""
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
    extend_ignore: list[str] = field(default_factory=list)
    exclude: Optional[list[str]] = None
    extend_exclude: list[str] = field(default_factory=list)
    per_file_ignores: dict[str, list[str]] = field(default_factory=dict)
    verify: Optional[bool] = None
    verify_timeout: Optional[float] = None
    verify_memory: Optional[int] = None
    extend_trace_decorators: list[str] = field(default_factory=list)
    include: Optional[list[str]] = None  # file-name globs walked for in folders (default: *.py, *.ipynb)
    extend_include: list[str] = field(default_factory=list)
    respect_gitignore: Optional[bool] = None
    # key -> where its value came from, for error messages ("pyproject.toml: [tool.jaxlint] `ignore`")
    sources: dict[str, str] = field(default_factory=dict)

    def source(self, key: str) -> str:
        return self.sources.get(key, f"[tool.jaxlint] `{key}`")


_LIST_KEYS = {"select", "ignore", "extend-select", "extend-ignore", "exclude", "extend-exclude",
              "extend-trace-decorators", "include", "extend-include"}
_BOOL_KEYS = {"verify", "respect-gitignore"}
_KEYS = _LIST_KEYS | _BOOL_KEYS | {"per-file-ignores", "verify-timeout", "verify-memory"}


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


def _str_list(value: Any, where: str) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise ConfigError(f"{where} must be a list of strings, got {value!r}.")


def _unknown_key(key: str, where: str) -> ConfigError:
    from .suppress import suggest

    close = suggest(key, sorted(_KEYS))
    hint = f"; did you mean `{close}`?" if close else f" (known keys: {', '.join(sorted(_KEYS))})."
    return ConfigError(f"{where}: unknown key `{key}` in [tool.jaxlint]{hint}")


def apply(cfg: Config, section: dict[str, Any], origin: str, label: Optional[str] = None) -> None:
    """Validate `section` (a `[tool.jaxlint]` table) and set its values on `cfg`.

    `origin` starts each error ("path/pyproject.toml: ..." or "--config `verify=1`: ..."); `label`
    formats a key for messages (default "[tool.jaxlint] `key`").
    """
    for key, value in section.items():
        if key not in _KEYS:
            raise _unknown_key(key, origin)
        where = f"{origin}: " + (label or "[tool.jaxlint] `{}`").format(key)
        cfg.sources[key] = where
        attr = key.replace("-", "_")
        if key in _LIST_KEYS:
            setattr(cfg, attr, _str_list(value, where))
        elif key == "per-file-ignores":
            if not isinstance(value, dict):
                raise ConfigError(f"{where} must be a table of glob = [codes].")
            cfg.per_file_ignores = {g: _str_list(v, f"{where}.{g}") for g, v in value.items()}
        elif key in _BOOL_KEYS:
            if not isinstance(value, bool):
                raise ConfigError(f"{where} must be true or false, got {value!r}.")
            setattr(cfg, attr, value)
        elif key == "verify-timeout":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ConfigError(f"{where} must be a positive number of seconds, got {value!r}.")
            cfg.verify_timeout = float(value)
        elif key == "verify-memory":
            if isinstance(value, bool) or not isinstance(value, int) or value < 64:
                raise ConfigError(f"{where} must be a whole number of MiB (at least 64), got {value!r}.")
            cfg.verify_memory = value


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
    apply(cfg, section, path)
    return cfg


def override(cfg: Config, text: str) -> None:
    """Apply one `--config KEY=VALUE` (TOML syntax: `verify=false`, `select=["JL1"]`) on top of `cfg`."""
    origin = f"--config `{text}`"
    try:
        section = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{origin}: not a path to a pyproject.toml nor a TOML `KEY = VALUE` "
                          f"(such as `verify = false` or `select = [\"JL1\"]`): {exc}.") from None
    # `tool.jaxlint.select = [...]` is accepted too: it is what the line would be in pyproject.toml.
    if set(section) == {"tool"} and isinstance(section["tool"], dict) and set(section["tool"]) == {"jaxlint"}:
        section = section["tool"]["jaxlint"]
        if not isinstance(section, dict):
            raise ConfigError(f"{origin}: [tool.jaxlint] must be a table.")
    apply(cfg, section, origin, label="`{}`")
