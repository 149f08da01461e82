import jax


def test_loop_bound_under_jit():
    @jax.jit
    def total(n):
        acc = 0
        for i in range(n):
            acc += i
        return acc

    try:
        total(10)
    except Exception as exc:  # the test expects the failure and goes on
        print("expected:", type(exc).__name__)
