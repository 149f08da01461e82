from functools import partial

import jax


class Pricer:
    def __init__(self, path: str):
        with open(path) as f:
            self.market = parse(f.read())
            self.model = None

    @partial(jax.jit, static_argnums=0)
    def price(self, strike):
        spot = self.market.spot
        if spot > strike:
            return spot - strike
        return 0.0 * strike

    @partial(jax.jit, static_argnums=0)
    def predict(self, x):
        y = self.model.apply(x)
        if y > 0:
            return y
        return -y


def parse(text):
    return text
