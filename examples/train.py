"""A small regression model trained with JAX, written with five trace hazards for jaxlint to find.

Each hazard is marked `# expect: <rule>[<verdict>]`: the rule jaxlint reports on that line and what
verification by tracing says about it (the project's tests check exactly this). `train_fixed.py`
beside this file is the same script with every hazard fixed.
"""
import jax
import jax.numpy as jnp

losses = []  # the training loss, step by step


def make_dataset(key, n_batches, batch_size=32):
    true_w = jnp.array([[1.0], [-2.0], [0.5]])
    batches = []
    for _ in range(n_batches):
        # The same key on every pass: every batch holds the same numbers.
        inputs = jax.random.normal(key, (batch_size, 3))  # expect: prng-key-reuse[confirmed]
        batches.append((inputs, inputs @ true_w + 0.3))
    return batches


def loss_fn(w, b, x, y):
    return jnp.mean((x @ w + b - y) ** 2)


@jax.jit
def train_step(w, b, x, y):
    loss, (dw, db) = jax.value_and_grad(loss_fn, argnums=(0, 1))(w, b, x, y)
    # Runs once, while JAX traces the step, and prints a tracer, not the loss.
    print("loss", loss)  # expect: print-in-trace[confirmed]
    # Appends one tracer per compilation, not one loss per step.
    losses.append(loss)  # expect: global-mutation[confirmed]
    return w - 0.1 * dw, b - 0.1 * db


@jax.jit
def eval_loss(w, b, x, y):
    loss = loss_fn(w, b, x, y)
    # Under jit `loss` has no value yet: Python cannot branch on it.
    if jnp.isnan(loss):  # expect: traced-if[confirmed]
        raise FloatingPointError("the loss diverged")
    return loss


def main():
    data_key, init_key = jax.random.split(jax.random.key(0))
    dataset = make_dataset(data_key, n_batches=200)
    w = 0.1 * jax.random.normal(init_key, (3, 1))
    b = jnp.zeros((1,))
    for step, (x, y) in enumerate(dataset):
        w, b = train_step(w, b, x, y)
        if step % 50 == 0:
            # A new lambda on each pass is a new cache entry: JAX traces and compiles it again.
            loss = jax.jit(lambda w, b: eval_loss(w, b, x, y))(w, b)  # expect: jit-in-loop[confirmed]
            print(f"step {step}: loss {float(loss):.4f}")


if __name__ == "__main__":
    main()
