"""`python -m jaxlint`."""
from .cli import main

main()
