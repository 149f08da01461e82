import os

import jax


def _bail():
    os._exit(3)


SCALE = _bail()


@jax.jit
def f(x):
    if x > 0:
        return x * SCALE
    return x
