import jax


def _litter():
    with open("litter.txt", "w") as f:  # relative: lands in the worker's temporary folder
        f.write("x")
    return 1.0


SCALE = _litter()


@jax.jit
def f(x):
    if x > 0:
        return x * SCALE
    return x
