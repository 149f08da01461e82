"""The console script and `python -m jaxlint`: a Ctrl-C while the linter's modules are still loading
(about a second on a cold start) exits 130 with one line, like a Ctrl-C during the run, not a traceback."""
from __future__ import annotations

import os
import signal
import sys


def _loading_interrupted(signum: int, frame: object) -> None:
    sys.stderr.write("jaxlint: interrupted\n")
    sys.stderr.flush()
    os._exit(130)


def main() -> None:
    quiet = signal.getsignal(signal.SIGINT) is signal.default_int_handler  # (left alone when ignored)
    if quiet:
        signal.signal(signal.SIGINT, _loading_interrupted)
    from .cli import entry

    if quiet:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    entry()
