"""jaxlint: find JAX trace hazards statically, then prove them by tracing."""
from __future__ import annotations

# The distribution's name, not the import package's: `jaxlint` on the package index is another project.
DISTRIBUTION = "jax-trace-hazards"

# Written here, not read back from the installed distribution's metadata: importing importlib.metadata costs
# about a tenth of a second at every start (a pre-commit hook starts jaxlint on every commit).
# pyproject.toml reads this line (`[tool.setuptools.dynamic]`), so there is one place to change.
__version__ = "0.1.0"
