"""The project's own tests: they pass, and along the way they show what JAX does at each flagged line."""
import jax
import jax.numpy as jnp
import pytest

from trainer import steps


def test_clipped_update_rejects_a_traced_limit():
    with pytest.raises(jax.errors.TracerBoolConversionError):
        steps.clipped_update(jnp.ones(3), jnp.ones(3), 0.5)


def test_repeat_update_with_a_python_int():
    out = steps.repeat_update(jnp.ones(3), 3)
    assert out.tolist() == [3.0, 3.0, 3.0]


def test_logged_step_runs_its_side_effects_once_per_trace():
    params = jnp.zeros(2)
    for _ in range(3):
        params = steps.logged_step(params, jnp.ones(2))
    assert len(steps.history) == 1


def test_train_rebuilds_the_jitted_update():
    out = steps.train(jnp.zeros(2), jnp.ones(2), 3)
    assert jnp.allclose(out, -0.3)


def test_scaled_keeps_the_rate_of_its_first_trace():
    first = steps.scaled(jnp.ones(1))
    steps.set_rate(0.5)
    second = steps.scaled(jnp.ones(1))
    assert jnp.allclose(first, second) and jnp.allclose(first, 0.1)


def test_noisy_init_shapes():
    weights, bias = steps.noisy_init(jax.random.key(0), (2, 3))
    assert weights.shape == (2, 3) and bias.shape == (3,)
