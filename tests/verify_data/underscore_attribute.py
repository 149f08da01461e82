import jax
import jax.numpy as jnp


@jax.jit
def pad(batch):
    if batch._pad_token.sum() > 0:
        return jnp.pad(batch.tokens, 1)
    return batch.tokens
