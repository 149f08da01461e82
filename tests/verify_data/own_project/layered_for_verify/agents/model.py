import jax

import toolbox_for_verify


@jax.jit
def step(x):
    if toolbox_for_verify.total(x) > 0:
        return x
    return -x
