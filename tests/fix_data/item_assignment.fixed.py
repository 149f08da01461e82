import jax.numpy as jnp


def update(i, v):
    x = jnp.zeros(8)
    x = x.at[i].set(v)
    x = x.at[i].add(v)  # accumulate
    x = x.at[0].subtract(1.0)
    x = x.at[1:3].multiply(2.0)
    x = x.at[2].divide(v)
    x = x.at[3].power(2)
    x[4] //= 2
    return x
