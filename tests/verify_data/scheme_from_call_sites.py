import jax.numpy as jnp


def adjust(x0, h, num_steps, scheme):
    # NumPy code ported to jnp: `scheme` is a string each caller passes, `h.copy()` an array method.
    if scheme == "1-sided":
        use_one_sided = jnp.ones_like(h, dtype=bool)
    elif scheme == "2-sided":
        h = jnp.abs(h)
        use_one_sided = jnp.zeros_like(h, dtype=bool)
    else:
        raise ValueError("`scheme` must be '1-sided' or '2-sided'.")
    h_adjusted = h.copy()
    if scheme == "1-sided":
        h_adjusted[0] = x0 / num_steps
    else:
        h_adjusted[1] = -x0 / num_steps
    return h_adjusted, use_one_sided


def derivative(x0):
    h = jnp.full(3, 1e-3)
    one = adjust(x0, h, 1, "1-sided")
    two = adjust(x0, h, 1, "2-sided")
    return one, two
