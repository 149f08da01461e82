"""A tiny trainer package: a few jitted steps, some with trace hazards and some that only look like them."""
