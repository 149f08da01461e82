import jax


def _interrupt():
    raise KeyboardInterrupt


SCALE = _interrupt()


@jax.jit
def f(x):
    x = x * SCALE
    if x > 0:
        return x
    return x
