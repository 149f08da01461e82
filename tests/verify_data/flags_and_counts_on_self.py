from functools import partial

import jax
import jax.numpy as jnp


class Encoder:
    def __init__(self, config_path):
        raise RuntimeError("reads a configuration file")  # so verification builds the instance bare

    @partial(jax.jit, static_argnums=0)
    def encode(self, table, agent_id):
        width = self.n_features
        if self.use_bias:
            width += 1
        out = jnp.zeros(width)
        for _ in range(self.num_rounds):
            out = out * 0.5
        row = table[agent_id]
        if row.sum() > 0:
            out = out + 1.0
        return out
