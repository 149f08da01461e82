import jax
import jax.numpy as jnp


@jax.jit
def f(x, n: int, mode: str = "a"):
    if n > 2:
        x = x * 2
    while n > 0:
        n = n - 1
    return x
