import jax
import jax.numpy as jnp

import ownpkg_for_verify
import not_installed_plotting_lib_for_verify as plotting


def show(x):
    plotting.figure(x)


@jax.jit
def step(x):
    if ownpkg_for_verify.total(x) > 0:
        return x
    return -x


@jax.jit
def plotted_step(x):
    show(x)
    if x > 0:
        return x
    return -x


@jax.jit
def guarded_step(x):
    try:
        show(x)
    except ImportError:
        pass
    if x.ndim == 0:
        return x
    return -x
