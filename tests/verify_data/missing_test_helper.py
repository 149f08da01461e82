import jax
import this_test_helper_does_not_exist_anywhere
from this_test_helper_does_not_exist_anywhere import fixtures


@jax.jit
def f(x):
    if x > 0:
        return x
    return -x


@fixtures.parametrize("x", [1.0])
def test_f(x):
    assert this_test_helper_does_not_exist_anywhere.close(f(x), x)
