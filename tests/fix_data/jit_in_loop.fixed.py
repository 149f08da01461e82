from functools import partial

import jax
import jax.numpy as jnp


def power(x, p):
    return x ** p


def loss(w):
    return jnp.sum(w ** 2)


def run(xs, w):
    out = []
    jitted = jax.jit(partial(power, p=2))
    for x in xs:
        # build the jitted square
        out.append(jitted(x))
    jitted_2 = jax.jit(jax.grad(loss))
    for _ in range(3):
        w = w - 0.1 * jitted_2(w)
    return out, w


def shifted(xs, shifts):
    return [jax.jit(lambda v: v + s)(xs) for s in shifts]
