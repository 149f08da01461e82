import jax


def _hog():
    blocks = []
    while True:
        blocks.append(bytearray(50 * 1024 * 1024))


SCALE = _hog()


@jax.jit
def f(x):
    if x > 0:
        return x * SCALE
    return x
