"""`python -m jaxlint`."""
from .launch import main

main()
