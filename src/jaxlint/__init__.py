"""jaxlint: find JAX trace hazards statically, then prove them by tracing."""
from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("jaxlint")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"
