import jax.numpy as jnp


def decode(v):
    out = jnp.zeros(3)
    if v.ndim == 1:
        out[0] = v.sum()
    return out


def grid(rows, cols):
    g = jnp.zeros((rows, cols))
    g[0, 0] = 1.0
    return g
