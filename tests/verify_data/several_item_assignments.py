import jax
import jax.numpy as jnp


@jax.jit
def assemble(x):
    grid = jnp.zeros((4, 4))
    grid[0, 0] = x.sum()
    grid[1] += x.mean()
    if grid.sum() > 0:
        grid = grid * 2
    return grid
