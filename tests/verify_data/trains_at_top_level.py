import os

import jax
import jax.numpy as jnp


@jax.jit
def step(x):
    if x > 0:
        return x
    return -x


def train():
    with open(os.environ["JAXLINT_TEST_MARKER"], "w") as f:
        f.write("training ran")
    for _ in range(3):
        step(jnp.ones(()))


train()  # no __main__ guard: verification must not run this
