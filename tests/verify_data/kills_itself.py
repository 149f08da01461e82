import os
import signal

import jax


def _die():
    os.kill(os.getpid(), signal.SIGKILL)


SCALE = _die()


@jax.jit
def f(x):
    if x > 0:
        return x * SCALE
    return x
