import jax


def _interrupt():
    raise KeyboardInterrupt


SCALE = _interrupt()


@jax.jit
def f(x):
    if x > 0:
        return x * SCALE
    return x
