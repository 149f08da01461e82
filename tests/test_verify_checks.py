"""The verification table: every rule has one entry, and real JAX errors confirm the right rules."""
from __future__ import annotations

import pytest

from jaxlint.rules import RULES, SYNTAX_ERROR, UNSUPPORTED_SYNTAX
from jaxlint.verify.checks import CHECKS, KINDS, NOT_VERIFIABLE, check_for, confirms, is_jax_error


def test_every_rule_has_a_check_or_a_reason() -> None:
    slugs = {r.name for r in RULES} | {SYNTAX_ERROR[1], UNSUPPORTED_SYNTAX[1]}
    missing = slugs - set(CHECKS) - set(NOT_VERIFIABLE)
    assert not missing, f"rules without a line in verify/checks.py: {sorted(missing)}"
    assert not set(CHECKS) & set(NOT_VERIFIABLE)
    assert not (set(CHECKS) | set(NOT_VERIFIABLE)) - slugs, "checks for rules that do not exist"
    for slug, reason in NOT_VERIFIABLE.items():
        assert reason.strip(), slug
    for slug, check in CHECKS.items():
        assert check.kind in KINDS, slug
        assert check.how, slug
    assert check_for("syntax-error") is None and check_for("traced-if") is CHECKS["traced-if"]


def _raised(fn, *args) -> BaseException:
    try:
        fn(*args)
    except Exception as exc:  # noqa: BLE001 - the exception is the result
        return exc
    raise AssertionError("expected an exception")


def test_real_jax_errors_confirm_their_rules() -> None:
    jax = pytest.importorskip("jax")
    jnp = jax.numpy

    def branch(x):
        if x > 0:
            return x
        return -x

    def convert(x):
        return float(x)

    def mask(x):
        return x[x > 0]

    def assign(x):
        x[0] = 1.0
        return x

    def reuse(key):
        return jax.random.normal(key) + jax.random.normal(key)

    bool_err = _raised(jax.jit(branch), 1.0)
    conv_err = _raised(jax.jit(convert), 1.0)
    mask_err = _raised(jax.jit(mask), jnp.ones(3))
    assign_err = _raised(assign, jnp.ones(3))
    assert confirms("traced-if", bool_err) and confirms("traced-while", bool_err)
    assert confirms("traced-conversion", conv_err) and not confirms("traced-bool-index", ValueError("x"))
    assert confirms("traced-bool-index", mask_err)
    assert confirms("array-item-assignment", assign_err) and not confirms("traced-if", assign_err)
    assert not confirms("print-in-trace", bool_err)  # trace-time rules are never confirmed by an error
    assert not confirms("no-such-rule", bool_err)
    with jax.debug_key_reuse(True):
        key_err = _raised(jax.jit(reuse), jax.random.key(0))
    assert confirms("prng-key-reuse", key_err)
    assert all(is_jax_error(e) for e in (bool_err, conv_err, mask_err, assign_err, key_err))
    assert not is_jax_error(ValueError("shapes (3,) and (4,) not aligned"))
