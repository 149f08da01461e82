import jax
import jax.numpy as jnp


@jax.jit
def step(x, y):
    print(x)
    print("loss", x, "step", y)
    print(f"x={x:.3f} y={y}")
    print("loss %.2f at %d" % (x, y))
    print("a {} b {}".format(x, y))  # keeps this comment
    print("braces {literal}", x)
    return x + y


def not_traced(x):
    print(x)  # runs eagerly: left alone
    return x
