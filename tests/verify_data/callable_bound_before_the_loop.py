"""A callable bound once, before the loop, then jitted on every pass: JAX's cache serves every pass."""
import jax


def train(xs):
    step = lambda v: v + 1.0
    out = []
    for i in range(3):
        out.append(jax.jit(step)(xs))
    return out
