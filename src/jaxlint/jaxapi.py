"""What jaxlint knows about JAX's API: transforms, control-flow bodies, and calls whose results are static."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Transform:
    """A JAX entry point that traces the callable it is given."""

    kind: str  # short name used in messages and by the verifier: jit, vmap, grad, ...
    abstract: bool  # values are abstract (bool()/int() on them fail) under this transform alone
    cached: bool  # the traced function is cached, so Python side effects run once per trace
    statics: str = ""  # how static parameters are written: "jit", "pmap", "vmap", "filter", ""


_JIT = Transform("jit", abstract=True, cached=True, statics="jit")

# Fully qualified names (as resolved through the module's imports) of function transforms.
TRANSFORMS: dict[str, Transform] = {
    "jax.jit": _JIT,
    "jax.api.jit": _JIT,
    "jax.experimental.pjit.pjit": Transform("pjit", True, True, "jit"),
    "jax.pjit": Transform("pjit", True, True, "jit"),
    "jax.pmap": Transform("pmap", True, True, "pmap"),
    "jax.vmap": Transform("vmap", True, False, "vmap"),
    "jax.grad": Transform("grad", False, False),
    "jax.value_and_grad": Transform("value_and_grad", False, False),
    "jax.jacfwd": Transform("jacfwd", True, False),
    "jax.jacrev": Transform("jacrev", True, False),
    "jax.hessian": Transform("hessian", True, False),
    "jax.checkpoint": Transform("checkpoint", True, False, "jit"),
    "jax.remat": Transform("checkpoint", True, False, "jit"),
    "jax.ad_checkpoint.checkpoint": Transform("checkpoint", True, False, "jit"),
    "equinox.filter_jit": Transform("filter_jit", True, True, "filter"),
    "equinox.filter_vmap": Transform("vmap", True, False, "filter"),
    "equinox.filter_pmap": Transform("pmap", True, True, "filter"),
    "equinox.filter_grad": Transform("grad", False, False, "filter"),
    "equinox.filter_value_and_grad": Transform("value_and_grad", False, False, "filter"),
    "equinox.filter_checkpoint": Transform("checkpoint", True, False, "filter"),
}

# Transforms whose call inside a loop re-traces when handed a fresh callable (jit-in-loop).
JIT_LIKE = frozenset(
    q for q, t in TRANSFORMS.items() if t.kind in ("jit", "pjit", "pmap", "filter_jit")
)

# Control-flow primitives and the argument slots that hold traced callables.
# Each slot is (positional index, keyword name, is_sequence_of_callables).
LAX_BODIES: dict[str, tuple[str, tuple[tuple[int, str, bool], ...]]] = {
    "jax.lax.scan": ("scan", ((0, "f", False),)),
    "jax.lax.fori_loop": ("fori_loop", ((2, "body_fun", False),)),
    "jax.lax.while_loop": ("while_loop", ((0, "cond_fun", False), (1, "body_fun", False))),
    "jax.lax.cond": ("cond", ((1, "true_fun", False), (2, "false_fun", False))),
    "jax.lax.switch": ("switch", ((1, "branches", True),)),
    "jax.lax.map": ("map", ((0, "f", False),)),
    "jax.lax.associative_scan": ("associative_scan", ((0, "fn", False),)),
}

# Calls that hand their callable argument traced leaves when (and only when) they run in traced code.
TREE_MAPS = frozenset(
    {
        "jax.tree_util.tree_map",
        "jax.tree_map",
        "jax.tree.map",
        "jax.tree_util.tree_map_with_path",
        "jax.tree.map_with_path",
    }
)

# Module prefixes whose calls are staged (produce tracers) inside a trace.
STAGING_MODULES = (
    "jax.numpy.",
    "jax.lax.",
    "jax.random.",
    "jax.nn.",
    "jax.scipy.",
    "jax.image.",
    "jax.ops.",
)

# Calls whose result is a Python value known at trace time, whatever their arguments.
STATIC_CALLS = frozenset(
    {
        "builtins.len",
        "builtins.isinstance",
        "builtins.issubclass",
        "builtins.type",
        "builtins.id",
        "builtins.callable",
        "builtins.hasattr",
        "builtins.repr",
        "builtins.str",
        "builtins.int",
        "builtins.float",
        "builtins.bool",
        "builtins.complex",
        "jax.numpy.shape",
        "jax.numpy.ndim",
        "jax.numpy.size",
        "jax.numpy.result_type",
        "jax.numpy.dtype",
        "jax.numpy.issubdtype",
        "jax.numpy.iscomplexobj",
        "jax.numpy.isrealobj",
        "jax.numpy.isscalar",
        "jax.numpy.finfo",
        "jax.numpy.iinfo",
        "jax.numpy.promote_types",
        "jax.numpy.can_cast",
        "numpy.shape",
        "numpy.ndim",
        "numpy.size",
        "jax.tree_util.tree_structure",
        "jax.tree.structure",
        "jax.typeof",
        "jax.device_count",
        "jax.local_device_count",
        "jax.process_index",
        "jax.process_count",
        "jax.devices",
        "jax.local_devices",
        "jax.default_backend",
        "jax.lax.axis_size",
        "jax.dtypes.canonicalize_dtype",
        "jax.lax.broadcast_shapes",
        "jax.numpy.broadcast_shapes",
        "jax.eval_shape",
        "equinox.filter_eval_shape",
        "jax.dtypes.issubdtype",
        "jax.dtypes.result_type",
    }
)

# Attributes of an array that are static under tracing.
STATIC_ATTRS = frozenset(
    {"shape", "ndim", "dtype", "size", "itemsize", "nbytes", "sharding", "weak_type", "aval", "__class__"}
)

# Attributes of an array that are arrays again (any other attribute of a traced object that is not a
# pytree JAX flattened is taken to be Python configuration).
ARRAY_ATTRS = frozenset({"T", "mT", "H", "real", "imag", "at"})

# Annotations that name a container: truthiness of such a value is static even when its leaves are traced.
CONTAINER_ANNOTATIONS = frozenset(
    {"dict", "list", "tuple", "Dict", "List", "Tuple", "Mapping", "Sequence", "MutableMapping", "FrozenDict"}
)

# Annotations that name a Python scalar or other non-array: static under equinox's filter transforms.
NON_ARRAY_ANNOTATIONS = frozenset({"int", "bool", "str", "float", "complex", "Callable", "None"})

# Annotations that name an array.
ARRAY_ANNOTATIONS = frozenset({"Array", "ndarray", "ArrayLike", "ShapeDtypeStruct", "Float", "Int", "Bool", "Shaped", "Num", "Real", "Key", "UInt", "Complex", "Inexact", "Integer", "PRNGKeyArray"})

# Methods that mutate a Python container in place.
MUTATING_METHODS = frozenset(
    {
        "append",
        "extend",
        "insert",
        "update",
        "setdefault",
        "pop",
        "popitem",
        "clear",
        "add",
        "remove",
        "discard",
        "appendleft",
        "extendleft",
        "popleft",
        "__setitem__",
        "__delitem__",
    }
)

# Host callbacks: functions handed to these run on the host with concrete values, not traced.
CALLBACKS = frozenset(
    {
        "jax.pure_callback",
        "jax.debug.callback",
        "jax.experimental.io_callback",
        "jax.experimental.host_callback.id_tap",
        "jax.experimental.host_callback.call",
    }
)
