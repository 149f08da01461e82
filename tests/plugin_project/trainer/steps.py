"""Training steps; the hazards here are deliberate, each exercised by a test."""
import time

import equinox as eqx
import jax
import jax.numpy as jnp

LEARNING_RATE = 0.1
history = []


@jax.jit
def clipped_update(params, grads, limit):
    # `limit` is a traced argument of a jitted function: the comparison cannot be decided.
    if limit > 0:
        return params - jnp.clip(grads, -limit, limit)
    return params - grads


@eqx.filter_jit
def repeat_update(params, times):
    # Looks like the hazard above, but filter_jit keeps the Python int `times` static: it is concrete.
    if times > 1:
        return params * times
    return params


@jax.jit
def logged_step(params, grads):
    print("logged_step")
    history.append(grads)
    stamp = time.time()
    return params - LEARNING_RATE * grads + 0.0 * stamp


def train(params, grads, steps):
    for _ in range(steps):
        update = jax.jit(lambda p, g: p - LEARNING_RATE * g)
        params = update(params, grads)
    return params


@jax.jit
def scaled(params):
    return params * LEARNING_RATE


def set_rate(rate):
    global LEARNING_RATE
    LEARNING_RATE = rate


@jax.jit
def untested(x):
    # No test calls this: the plugin has nothing to say about it.
    if x.sum() > 0:
        return x
    return -x


def noisy_init(key, shape):
    weights = jax.random.normal(key, shape)
    bias = jax.random.uniform(key, shape[-1:])
    return weights, bias
