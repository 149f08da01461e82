import jax
import this_package_does_not_exist_anywhere


@jax.jit
def f(x):
    if x > 0:
        return x
    return x
