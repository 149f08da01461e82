import jax.numpy as jnp


class Projection:
    def __init__(self, **config):
        self.check(config)  # fails without a configuration: the instance is built bare
        self.scale = config["scale"]
        self.offset = config["offset"]
        self.use_grid = config["use_grid"]
        self.keep_cell = config["keep_cell"]

    def check(self, config):
        if "scale" not in config:
            raise KeyError("scale")

    def recover(self, rel):
        return rel * self.scale + self.offset / 2

    def cell_of(self, feats):
        out = jnp.zeros(4)
        cell = int(self.recover(feats[0]))
        out[0] = cell
        return out

    def grid_cell_of(self, feats):
        out = jnp.zeros(4)
        cell = int(self.recover(feats[0]))
        if self.use_grid:
            raise NotImplementedError
        if self.keep_cell:
            out[1] = cell
        return out
