import jax

from ownns_for_verify.solvers.norms import total


@jax.jit
def step(x):
    if total(x) > 0:
        return x
    return -x
