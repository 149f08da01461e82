import jax


def _forever():
    while True:
        pass


SCALE = _forever()  # the traced function needs SCALE, so this runs: it must only cost the verdict


@jax.jit
def f(x):
    if x > 0:
        return x * SCALE
    return x
