import jax
import jax.numpy as jnp


@jax.jit
def attend(q):
    b, n, d = q.shape
    scores = q @ jnp.swapaxes(q, -1, -2) / d
    if jnp.max(scores) > 0:
        return scores
    if n > 2:
        return -scores
    return scores


@jax.jit
def last_channel(img):
    red = img[..., 0]
    if red.sum() > 0:
        return red
    return -red


@jax.jit
def scale_by_width(x):
    b, n, d = x.shape
    if d > 2:
        return x / d
    return x
