import socket

import jax


def _connect():
    # A local address only: nothing listens, so this fails fast; it must cost only the verdict.
    s = socket.create_connection(("127.0.0.1", 9), timeout=1)
    s.close()
    return 1.0


SCALE = _connect()


@jax.jit
def f(x):
    x = x * SCALE
    if x > 0:
        return x
    return x
