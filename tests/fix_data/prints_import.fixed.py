"""A module that imports only jax.numpy and lax."""
from jax import lax
import jax.numpy as jnp
import jax


def body(carry, x):
    jax.debug.print("carry {}", carry)
    return carry + x, x


def run(xs):
    return lax.scan(body, 0.0, xs)
