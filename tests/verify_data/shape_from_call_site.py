import jax
import jax.numpy as jnp


@jax.jit
def to_patches(img):
    patches = img.reshape(4, 3)
    if patches.sum() > 0:
        return patches
    return -patches


@jax.jit
def to_rows(x):
    rows = x.reshape(2, -1)
    if rows.shape[1] == 6 and rows.sum() > 0:
        return rows
    return -rows


def main():
    img = jnp.zeros((2, 6))
    a = to_patches(img)
    b = to_rows(jax.random.normal(jax.random.PRNGKey(0), (2, 6)))
    c = to_rows(jnp.ones((3, 5)))
    return a, b, c
