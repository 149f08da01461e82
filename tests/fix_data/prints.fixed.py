import jax
import jax.numpy as jnp


@jax.jit
def step(x, y):
    jax.debug.print("{}", x)
    jax.debug.print("loss {} step {}", x, y)
    jax.debug.print("x={:.3f} y={}", x, y)
    jax.debug.print("loss {:.2f} at {}", x, y)
    jax.debug.print("a {} b {}", x, y)  # keeps this comment
    jax.debug.print("braces {{literal}} {}", x)
    return x + y


def not_traced(x):
    print(x)  # runs eagerly: left alone
    return x
