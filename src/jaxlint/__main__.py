"""`python -m jaxlint`."""
from .cli import entry

entry()
