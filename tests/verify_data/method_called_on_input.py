import jax


@jax.jit
def f(optimizer, x):
    if x > 0:
        return optimizer.update(x)
    return x
