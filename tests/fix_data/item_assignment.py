import jax.numpy as jnp


def update(i, v):
    x = jnp.zeros(8)
    x[i] = v
    x[i] += v  # accumulate
    x[0] -= 1.0
    x[1:3] *= 2.0
    x[2] /= v
    x[3] **= 2
    x[4] //= 2
    return x
