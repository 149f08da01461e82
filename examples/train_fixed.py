"""`train.py` with its five trace hazards fixed: jaxlint reports nothing here, and the script trains."""
import jax
import jax.numpy as jnp


def make_dataset(key, n_batches, batch_size=32):
    true_w = jnp.array([[1.0], [-2.0], [0.5]])
    batches = []
    # One new key per batch.
    for batch_key in jax.random.split(key, n_batches):
        inputs = jax.random.normal(batch_key, (batch_size, 3))
        batches.append((inputs, inputs @ true_w + 0.3))
    return batches


def loss_fn(w, b, x, y):
    return jnp.mean((x @ w + b - y) ** 2)


@jax.jit
def train_step(w, b, x, y):
    loss, (dw, db) = jax.value_and_grad(loss_fn, argnums=(0, 1))(w, b, x, y)
    # The loss goes out as a result: the caller prints and records it, once per step.
    return w - 0.1 * dw, b - 0.1 * db, loss


@jax.jit
def eval_loss(w, b, x, y):
    return loss_fn(w, b, x, y)


def main(n_batches=200):
    data_key, init_key = jax.random.split(jax.random.key(0))
    dataset = make_dataset(data_key, n_batches)
    w = 0.1 * jax.random.normal(init_key, (3, 1))
    b = jnp.zeros((1,))
    losses = []
    for step, (x, y) in enumerate(dataset):
        w, b, loss = train_step(w, b, x, y)
        losses.append(float(loss))
        if step % 50 == 0:
            # `eval_loss` is jitted once, outside the loop; the check runs on a concrete value.
            val = float(eval_loss(w, b, x, y))
            if val != val:
                raise FloatingPointError("the loss diverged")
            print(f"step {step}: loss {val:.4f}")
    return losses


if __name__ == "__main__":
    main()
