"""A key reused behind a branch on a concrete value: it cannot be traced, only run."""
import jax


def noisy_when_positive(key, x):
    if float(x.sum()) > 0:
        a = jax.random.normal(key)
        b = jax.random.normal(key)
        return a + b
    return x


def traceable(key):
    a = jax.random.uniform(key)
    b = jax.random.uniform(key)
    return a + b
