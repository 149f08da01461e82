"""jaxlint: find JAX trace hazards statically, then prove them by tracing."""
from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

# The distribution's name, not the import package's: `jaxlint` on the package index is another project.
DISTRIBUTION = "jax-trace-hazards"

try:
    __version__ = version(DISTRIBUTION)
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"
