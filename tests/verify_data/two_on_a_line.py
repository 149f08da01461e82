"""Lines that hold two candidates for one finding: only the static pass's subject tells them apart."""
import time

import jax
import jax.numpy as jnp
import numpy as np

HISTORY = []
TALLY = []
STEPS = []
TRACERS = []


@jax.jit
def logged_step(x):
    HISTORY.append(1); TALLY.append(2)
    return x * 2.0


def leaky_loss(x):
    STEPS.append(1); TRACERS.append(x)
    return jnp.sum(x ** 2)


leaky_grad = jax.grad(leaky_loss)


def double(v):
    return v * 2.0


def rebuild_each_pass(xs):
    out = []
    for i in range(3):
        out.append(jax.jit(double)(xs) + jax.jit(lambda v: v * i)(xs))
    return out


def draws(key):
    a = jax.random.fold_in(key, 1)
    b = jax.random.fold_in(key, 1)
    x = jax.random.normal(a)
    y = jax.random.normal(a)
    return x + y + jax.random.normal(b)


NOISY = False


@jax.jit
def maybe_noisy(x):
    noise = np.random.rand() if NOISY else 0.0; stamp = time.time()
    return x + noise + 0.0 * stamp
