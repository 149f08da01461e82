import os
import time

import jax


def _spawn():
    pid = os.fork()
    if pid == 0:  # the child outlives the worker unless the fence kills it
        with open(os.environ["JAXLINT_TEST_CHILD"], "w") as f:
            f.write(str(os.getpid()))
        time.sleep(120)
        os._exit(0)
    return 1.0


SCALE = _spawn()


@jax.jit
def f(x):
    if x > 0:
        return x * SCALE
    return x
