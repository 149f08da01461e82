import jax
import this_package_does_not_exist_anywhere


@jax.jit
def f(x):
    x = this_package_does_not_exist_anywhere.prepare(x)
    if x > 0:
        return x
    return x
