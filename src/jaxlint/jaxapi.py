"""What jaxlint knows about JAX's API: transforms, control-flow bodies, and calls whose results are static."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import libcst as cst


@dataclass(frozen=True)
class Transform:
    """A JAX entry point that traces the callable it is given."""

    kind: str  # short name used in messages and by the verifier: jit, vmap, grad, ...
    abstract: bool  # values are abstract (bool()/int() on them fail) under this transform alone
    cached: bool  # the traced function is cached, so Python side effects run once per trace
    # how static parameters are written: "jit", "pmap", "vmap", "filter", "custom", "shard_map", "" — or
    # "grad": only the `argnums` parameters are traced by the transform, the rest pass through as given
    statics: str = ""
    # flax nnx's transforms split a Module argument into its Variables (traced) and the rest of its
    # graph (static): a configuration attribute of a Module argument stays a Python value
    graph: bool = False


_JIT = Transform("jit", abstract=True, cached=True, statics="jit")

# Fully qualified names (as resolved through the module's imports) of function transforms.
TRANSFORMS: dict[str, Transform] = {
    "jax.jit": _JIT,
    "jax.api.jit": _JIT,
    "jax.experimental.pjit.pjit": Transform("pjit", True, True, "jit"),
    "jax.pjit": Transform("pjit", True, True, "jit"),
    "jax.pmap": Transform("pmap", True, True, "pmap"),
    "jax.vmap": Transform("vmap", True, False, "vmap"),
    "jax.grad": Transform("grad", False, False, "grad"),
    "jax.value_and_grad": Transform("value_and_grad", False, False, "grad"),
    # The primal stays concrete under jacfwd/jacrev/hessian alone (only the tangents are batched).
    "jax.jacfwd": Transform("jacfwd", False, False, "grad"),
    "jax.jacrev": Transform("jacrev", False, False, "grad"),
    "jax.hessian": Transform("hessian", False, False, "grad"),
    "jax.checkpoint": Transform("checkpoint", True, False, "jit"),
    "jax.remat": Transform("checkpoint", True, False, "jit"),
    "jax.ad_checkpoint.checkpoint": Transform("checkpoint", True, False, "jit"),
    "jax.eval_shape": Transform("eval_shape", True, False),
    "jax.make_jaxpr": Transform("make_jaxpr", True, False, "jit"),
    "jax.linearize": Transform("linearize", False, False),
    "jax.jvp": Transform("jvp", False, False),
    "jax.vjp": Transform("vjp", False, False),
    "jax.custom_jvp": Transform("custom_jvp", False, False, "custom"),
    "jax.custom_vjp": Transform("custom_vjp", False, False, "custom"),
    # Called eagerly, shard_map runs its body on every call (op by op, on each device's shard); under
    # jit (where it is mostly used) the enclosing trace caches it.
    "jax.shard_map": Transform("shard_map", True, False, "shard_map"),
    "jax.experimental.shard_map.shard_map": Transform("shard_map", True, False, "shard_map"),
    # Flax's lifted jits handle `self` (a Module) and let Variables be updated in place.
    "flax.linen.jit": Transform("flax_jit", True, True, "jit"),
    "flax.nnx.jit": Transform("flax_jit", True, True, "jit", graph=True),
    "equinox.filter_jit": Transform("filter_jit", True, True, "filter"),
    "equinox.filter_vmap": Transform("vmap", True, False, "filter"),
    "equinox.filter_pmap": Transform("pmap", True, True, "filter"),
    "equinox.filter_grad": Transform("grad", False, False, "filter"),
    "equinox.filter_value_and_grad": Transform("value_and_grad", False, False, "filter"),
    "equinox.filter_checkpoint": Transform("checkpoint", True, False, "filter"),
    # nnx's lifted transforms take Modules as arguments (their Variables are the traced leaves).
    "flax.nnx.vmap": Transform("vmap", True, False, "vmap", graph=True),
    "flax.nnx.grad": Transform("grad", False, False, graph=True),
    "flax.nnx.value_and_grad": Transform("value_and_grad", False, False, graph=True),
    "flax.nnx.remat": Transform("checkpoint", True, False, "jit", graph=True),
    "flax.nnx.scan": Transform("scan", True, True, graph=True),
    "haiku.vmap": Transform("vmap", True, False, "vmap"),
    "haiku.remat": Transform("checkpoint", True, False, "jit"),
}

# `jax.shard_map` is also spelled through `jax.experimental.shard_map`; `jax.checkpoint` as `jax.remat`.
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
    "jax.experimental.ode.odeint": ("odeint", ((0, "func", False),)),
    "jax.lax.custom_root": ("custom_root", ((1, "solve", False), (2, "tangent_solve", False))),
    "flax.nnx.cond": ("cond", ((1, "true_fun", False), (2, "false_fun", False))),
    "flax.nnx.switch": ("switch", ((1, "branches", True),)),
    "flax.nnx.fori_loop": ("fori_loop", ((2, "body_fun", False),)),
    "flax.nnx.while_loop": ("while_loop", ((0, "cond_fun", False), (1, "body_fun", False))),
    "haiku.scan": ("scan", ((0, "f", False),)),
    "haiku.fori_loop": ("fori_loop", ((2, "body_fun", False),)),
    "haiku.cond": ("cond", ((1, "true_fun", False), (2, "false_fun", False))),
    "haiku.switch": ("switch", ((1, "branches", True),)),
    "haiku.while_loop": ("while_loop", ((0, "cond_fun", False), (1, "body_fun", False))),
    "haiku.map": ("map", ((0, "f", False),)),
}

# Calls that hand their callable argument traced leaves when (and only when) they run in traced code.
# `tree_reduce(function, tree, initializer)`
TREE_REDUCES = frozenset({"jax.tree_util.tree_reduce", "jax.tree.reduce"})
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

# Calls that read a model's parameters or state inside a transformed haiku function: under a traced
# `apply`, what they return is traced like the parameters passed to it.
PARAMETER_GETTERS = frozenset({"haiku.get_parameter", "haiku.get_state"})

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
        "jax.tree_structure",
        "jax.tree_util.keystr",
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
    {"shape", "ndim", "dtype", "size", "itemsize", "nbytes", "sharding", "weak_type", "aval", "__class__",
     "sizes", "dims",  # `sizes`, `dims`: the dimension lengths and names of an xarray object holding arrays
     "irreps",  # an e3nn `IrrepsArray`'s representation: metadata of the pytree, never a leaf
     # a Mesh's NumPy array of Device objects and axis names (an array's `.devices()` is a set of
     # devices): never a traced value, wherever the object holding them came from
     "devices", "axis_names", "device_ids", "local_devices"}
)

# The methods of `jax.Array`: a call of one of them says nothing about what else its receiver is.
ARRAY_METHODS = frozenset({
    "addressable_data", "all", "any", "argmax", "argmin", "argpartition", "argsort", "astype", "byteswap", "choose",
    "clip", "compress", "conj", "conjugate", "copy", "copy_to_host_async", "cumprod", "cumsum", "diagonal", "dot",
    "flatten", "item", "max", "mean", "min", "nonzero", "prod", "ptp", "ravel", "repeat", "reshape", "round",
    "searchsorted", "sort", "squeeze", "std", "sum", "swapaxes", "take", "to_device", "trace", "transpose", "var",
    "view",
})
# Attributes of an array that are arrays again (any other attribute of a traced object that is not a
# pytree JAX flattened is taken to be Python configuration).
ARRAY_ATTRS = frozenset({"T", "mT", "real", "imag", "at"})  # (`.H` is NumPy matrix only)

# Annotations that name a container: truthiness of such a value is static even when its leaves are traced.
CONTAINER_ANNOTATIONS = frozenset(
    {"dict", "list", "tuple", "Dict", "List", "Tuple", "Mapping", "Sequence", "MutableMapping", "FrozenDict",
     "ScalarSequence", "OptState"}  # an optax state is a tuple of per-transform states
)

# Base classes that make a class a Python container: `if not batch:` on one tests its emptiness.
CONTAINER_BASES = frozenset(
    {"typing.Mapping", "typing.MutableMapping", "typing.Sequence", "typing.MutableSequence", "typing.Dict",
     "typing.List", "collections.abc.Mapping", "collections.abc.MutableMapping", "collections.abc.Sequence",
     "collections.abc.MutableSequence", "collections.OrderedDict", "collections.UserDict", "collections.UserList",
     "collections.defaultdict", "builtins.dict", "builtins.list", "builtins.tuple", "typing.NamedTuple"}
)

# Callables that bind leading positional and keyword arguments of a function: `jax.tree_util.Partial`
# binds them as `functools.partial` does (and is a pytree besides, compared by value: caches keyed on it hit).
PARTIALS = frozenset({"functools.partial", "jax.tree_util.Partial"})

# Annotations that admit any pytree, a Python container included (`Any`, `chex.ArrayTree`): an argument JAX
# flattened with one of them may be the dict or list it rebuilt for the trace.
ANY_PYTREE_ANNOTATIONS = frozenset({"Any", "object", "PyTree", "Pytree", "ArrayTree"})

# Library names for mappings of arrays: an annotation with one of them is a Python container.
CONTAINER_ALIASES = frozenset({"haiku.Params", "haiku.State", "haiku.MutableParams", "haiku.MutableState"})

# Annotations that name a Python scalar or other non-array: static under equinox's filter transforms.
NON_ARRAY_ANNOTATIONS = frozenset({"int", "bool", "str", "float", "complex", "Callable", "None", "ScalarSequence"})

# jax.numpy functions that return a Python list of arrays (item assignment on it is fine).
LIST_RETURNING = frozenset({
    f"jax.numpy.{n}" for n in ("split", "array_split", "hsplit", "vsplit", "dsplit", "meshgrid", "broadcast_arrays",
                                "atleast_1d", "atleast_2d", "atleast_3d")
} | {"jax.tree_util.tree_leaves", "jax.tree.leaves", "jax.tree_leaves"})
# Calls returning a tuple whose first element is a Python list (`leaves, treedef = jax.tree.flatten(x)`).
LIST_FIRST_RETURNING = frozenset({"jax.tree_util.tree_flatten", "jax.tree.flatten", "jax.tree_flatten",
                                  "jax.tree_util.tree_flatten_with_path", "jax.tree.flatten_with_path"})

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

# Functions whose arguments must be static sizes: qualified name -> (positional indices, keyword names).
SHAPE_ARGS: dict[str, tuple[tuple[int, ...], tuple[str, ...]]] = {}
for _mod in ("jax.numpy", "numpy"):
    SHAPE_ARGS.update({
        f"{_mod}.zeros": ((0,), ("shape",)),
        f"{_mod}.ones": ((0,), ("shape",)),
        f"{_mod}.empty": ((0,), ("shape",)),
        f"{_mod}.full": ((0,), ("shape",)),
        f"{_mod}.arange": ((0, 1, 2), ("start", "stop", "step")),
        f"{_mod}.eye": ((0, 1), ("N", "M")),
        f"{_mod}.identity": ((0,), ("n",)),
        f"{_mod}.tri": ((0, 1), ("N", "M")),
        f"{_mod}.linspace": ((2,), ("num",)),
        f"{_mod}.logspace": ((2,), ("num",)),
        f"{_mod}.geomspace": ((2,), ("num",)),
        f"{_mod}.reshape": ((1,), ("shape", "newshape")),
        f"{_mod}.broadcast_to": ((1,), ("shape",)),
        f"{_mod}.tile": ((1,), ("reps",)),
        f"{_mod}.resize": ((1,), ("new_shape",)),
        f"{_mod}.pad": ((1,), ("pad_width",)),
    })
SHAPE_ARGS.update({
    "jax.lax.full": ((0,), ("shape",)),
    "jax.lax.iota": ((1,), ("size",)),
    "jax.lax.broadcast": ((1,), ("sizes",)),
    "jax.lax.broadcast_in_dim": ((1,), ("shape",)),
    "jax.lax.reshape": ((1,), ("new_sizes",)),
    "jax.lax.dynamic_slice": ((2,), ("slice_sizes",)),
    "jax.lax.dynamic_slice_in_dim": ((2,), ("slice_size",)),
    "jax.random.split": ((1,), ("num",)),
    "jax.nn.one_hot": ((1,), ("num_classes",)),
    "builtins.range": ((0, 1, 2), ()),
    "jax.numpy.argpartition": ((1,), ("kth",)),
    "jax.numpy.partition": ((1,), ("kth",)),
    "jax.lax.top_k": ((1,), ("k",)),
})
# jax.random samplers: the positional index of `shape`, which is also accepted as a keyword.
_RANDOM_SHAPE_POS = {
    "normal": 1, "uniform": 1, "randint": 1, "gumbel": 1, "exponential": 1, "laplace": 1, "logistic": 1,
    "cauchy": 1, "rademacher": 1, "bits": 1, "bernoulli": 2, "truncated_normal": 3, "choice": 2,
    "categorical": 3, "poisson": 2, "gamma": 2, "beta": 3, "dirichlet": 2, "multivariate_normal": 3,
    "t": 2, "chisquare": 2, "orthogonal": 2, "permutation": -1,
}
for _name, _pos in _RANDOM_SHAPE_POS.items():
    SHAPE_ARGS[f"jax.random.{_name}"] = (((_pos,) if _pos >= 0 else ()), ("shape",))
# Functions taking a dtype: qualified name -> positional index of `dtype` (also accepted as a keyword).
DTYPE_ARGS: dict[str, int] = {f"{_mod}.{_name}": _pos for _mod in ("jax.numpy", "numpy") for _name, _pos in (
    ("zeros", 1), ("ones", 1), ("empty", 1), ("full", 2), ("array", 1), ("asarray", 1), ("zeros_like", 1),
    ("ones_like", 1), ("full_like", 2), ("empty_like", 1))}
DTYPE_ARGS.update({f"jax.random.{_name}": 2 for _name in ("normal", "uniform", "bits", "gumbel", "exponential",
                                                          "laplace", "logistic", "cauchy", "rademacher")})
# Array methods whose arguments are sizes.
SHAPE_METHODS = frozenset({"reshape", "broadcast_to", "tile", "resize"})

# Functions that need `size=` under tracing when given one argument (or always).
NONZERO_LIKE = frozenset({"nonzero", "argwhere", "flatnonzero", "unique", "unique_values", "unique_counts",
                          "unique_inverse", "unique_all", "compress", "extract", "union1d", "intersect1d",
                          "setdiff1d", "setxor1d"})

# NumPy functions that convert their argument to a NumPy array (fail on tracers).
# (`np.argmax`, `np.argmin`, `np.cumsum`, `np.cumprod`, `np.round` call the array's own method, which
# works on a tracer, so they are not here; checked under jit.)
NUMPY_CONVERTING = frozenset({
    "asarray", "array", "ascontiguousarray", "asanyarray", "copy", "exp", "log", "log1p", "log2", "log10",
    "expm1", "sqrt", "square", "sin", "cos", "tan", "arcsin", "arccos", "arctan", "arctan2", "sinh", "cosh",
    "tanh", "abs", "absolute", "sign", "floor", "ceil", "rint", "maximum", "minimum", "add", "subtract",
    "multiply", "divide", "true_divide", "power", "mod", "clip", "where", "isnan", "isinf", "isfinite",
    "logical_and", "logical_or", "logical_not", "dot", "matmul", "einsum", "concatenate", "stack",
    "sort", "argsort", "diff", "outer", "histogram", "unique", "nonzero",
    "allclose", "array_equal", "float32", "float64", "int32", "int64",
})

# Clocks: what they return matters only where it is read (a timing left unused under trace bakes in nothing).
CLOCKS = frozenset({"time.time", "time.perf_counter", "time.monotonic", "time.process_time", "time.time_ns",
                    "time.perf_counter_ns", "time.monotonic_ns"})

# Calls whose result depends on the world, not the arguments: baked in as constants when traced.
IMPURE_CALLS = frozenset({
    "time.time", "time.time_ns", "time.perf_counter", "time.perf_counter_ns", "time.monotonic",
    "time.monotonic_ns", "time.process_time", "time.sleep", "datetime.datetime.now", "datetime.datetime.utcnow",
    "datetime.datetime.today", "datetime.date.today", "builtins.input", "builtins.open", "os.urandom", "uuid.uuid1",
    "uuid.uuid4", "socket.socket", "socket.create_connection",
    "urllib.request.urlopen", "requests.get", "requests.post", "secrets.token_bytes", "secrets.token_hex",
    "secrets.randbelow", "secrets.choice",
})
IMPURE_PREFIXES = ("random.", "numpy.random.", "requests.", "urllib.request.", "http.client.", "socket.")

# jax.random functions that consume a key (everything but constructors and key-data helpers).
KEY_MAKERS = frozenset({"PRNGKey", "key", "wrap_key_data", "key_data", "key_impl", "clone", "key_impl"})

# Class decorators and bases that make instances pytrees (so `self` is a valid traced argument).
PYTREE_CLASS_DECORATORS = frozenset({
    "flax.struct.dataclass", "jax.tree_util.register_pytree_node_class", "jax.tree_util.register_dataclass",
    "chex.dataclass", "jax.tree_util.register_static", "equinox.filter_jit", "jax_dataclasses.pytree_dataclass",
    "jax_primitives.pytree",
})
# Decorators whose pytrees keep as leaves only the fields annotated with one of `LEAF_FIELD_ANNOTATIONS`
# (`origin: Dynamic[jax.Array]`); every other field is aux data (`res_x: int`).
LEAF_MARKING_DECORATORS = frozenset({"jax_primitives.pytree"})
LEAF_FIELD_ANNOTATIONS = frozenset({"jax_primitives.Dynamic"})
# Field annotations that declare an aux-data (static) field of a dataclass pytree: `link_names: Static[tuple]`.
STATIC_FIELD_ANNOTATIONS = frozenset({"jax_dataclasses.Static"})
PYTREE_BASES = frozenset({"equinox.Module", "flax.struct.PyTreeNode", "flax.nnx.Module", "flax.nnx.Object",
                          "flax.nnx.Pytree", "penzai.core.struct.Struct", "penzai.pz.Struct", "simple_pytree.Pytree",
                          "flax.training.train_state.TrainState", "treeo.Tree", "treex.Module", "treex.Treex",
                          "pytreeclass.TreeClass", "genjax.Pytree", "genjax.core.Pytree"})

# Attributes of library pytree classes that are Python values whatever the leaves: aux data, and
# properties computed from the leaves' shapes (`SphericalSignal.res_beta` is `grid_values.shape[-2]`).
# MJX's models keep every field that is not a `jax.Array` in the treedef: the sizes are Python ints.
_MJX_SIZES = frozenset({
    "nq", "nv", "nu", "na", "nbody", "nbvh", "nbvhstatic", "nbvhdynamic", "njnt", "ngeom", "nsite", "ncam",
    "nlight", "nflex", "nflexvert", "nflexedge", "nflexelem", "nflexelemdata", "nflexshelldata", "nflexevpair",
    "nflextexcoord", "nmesh", "nmeshvert", "nmeshnormal", "nmeshtexcoord", "nmeshface", "nmeshgraph", "nmeshpoly",
    "nmeshpolyvert", "nmeshpolymap", "nskin", "nhfield", "nhfielddata", "ntex", "ntexdata", "nmat", "npair",
    "nexclude", "neq", "ntendon", "nwrap", "nsensor", "nnumeric", "ntuple", "nkey", "nmocap", "nM", "nB", "nC",
    "nD", "nJmom", "ntree", "ngravcomp", "nuserdata", "nsensordata", "nplugin"})
# An attribute named like an MJX size, read of an object whose class is not declared, in a module importing
# one of these packages (and of no class of the module): the model of a simulation handed along unannotated.
MJX_SIZE_ATTRIBUTES = _MJX_SIZES
MJX_PACKAGES = frozenset({"mujoco", "brax"})
LIBRARY_STATIC_ATTRIBUTES: dict[str, frozenset[str]] = {
    "e3nn_jax.IrrepsArray": frozenset({"irreps"}),
    "e3nn_jax.SphericalSignal": frozenset({"res_beta", "res_alpha", "grid_resolution", "quadrature", "p_val", "p_arg"}),
    "mujoco.mjx.Model": _MJX_SIZES,
    "mujoco.mjx._src.types.Model": _MJX_SIZES,
    "brax.System": _MJX_SIZES,
    "brax.base.System": _MJX_SIZES,
}


# Zero-argument methods of such wrappers that give back the Python value, by the package defining them:
# in a module importing genjax, `args["height"].unwrap()` is the int a `Pytree.const(h)` kept.
STATIC_UNWRAPS: dict[str, frozenset[str]] = {"genjax": frozenset({"unwrap"})}


def static_wrapper(qual: Optional[str]) -> bool:
    """A class whose instances are pytree nodes without leaves, the wrapped Python value kept in the
    treedef: genjax's `Const` (`n: Const[int]`, made by `const(3)` / `Pytree.const(3)`), whose `.value`
    (`.val`, `.unwrap()` in older releases) stays a Python value under any transform."""
    return qual is not None and qual.split(".")[0] == "genjax" and qual.rsplit(".", 1)[-1] == "Const"


# Pallas entry points whose callable receives mutable `Ref`s (kernel operands, pipeline buffers,
# scratch allocations) rather than arrays: `o_ref[...] = v` inside it is the API, not a hazard.
# Matched on the last component of a name under one of the Pallas packages (pl, pltpu, plgpu…).
PALLAS_PACKAGES = ("jax.experimental.pallas", "jax._src.pallas")
PALLAS_REF_CALLS = frozenset(
    {"pallas_call", "emit_pipeline", "emit_pipeline_with_allocations", "run_scoped", "kernel", "run_state"}
)
# Annotations that declare a parameter a mutable array reference (`vmem_ref: jax.Ref`).
REF_ANNOTATIONS = frozenset({"jax.Ref", "jax.ref.Ref", "jax.ref.AbstractRef"})
# Methods of a `Ref` that return a view of the same buffer (`ref.bitcast(jnp.uint32)`, `ref.reshape(2, -1)`):
# a store into the view writes the ref. `ref.at[i]` and `ref.T` are views too; `ref[i]` is a load.
REF_VIEW_METHODS = frozenset({"bitcast", "reshape", "transpose"})

# ---- model frameworks --------------------------------------------------------------------------
# Bases that make a class a model module, by framework.
MODULE_BASES: dict[str, str] = {
    "equinox.Module": "eqx",
    "flax.nnx.Module": "nnx",
    "flax.nnx.module.Module": "nnx",
    "flax.nnx.Pytree": "nnx",
    "flax.nnx.Object": "nnx",
    "flax.linen.Module": "linen",
    "flax.linen.module.Module": "linen",
    "haiku.Module": "haiku",
    # treex Modules are treeo Trees: a field is a leaf only when declared a node (`w: jnp.ndarray =
    # tx.Parameter.node()`) or when it holds another Tree; an int setting (`self.steps = steps`) is aux data
    "treex.Module": "treeo",
    "treex.Treex": "treeo",
    "treeo.Tree": "treeo",
}
# The public namespaces of the model frameworks whose API the model knows (`nnx.Module`, `nn.jit`,
# `eqx.field`), and their base classes by every name. A project holding a framework's source (the
# framework's own repository: flax's tests subclass `nnx.Module`, decorate with `@nnx.dataclass`) is not
# asked about these names: the model answers as it does for every project using the framework, and
# modelling the source behind them means modelling most of the framework, its metaclasses and
# registries, to learn less. The framework's own modules, importing each other by module path
# (`from .pytreelib import data`), still see one another.
FRAMEWORK_NAMESPACES = frozenset({"flax", "flax.linen", "flax.nnx", "flax.struct", "flax.core", "equinox",
                                  "equinox.nn", "haiku"})
_KNOWN_BASES = frozenset(MODULE_BASES) | PYTREE_BASES | CONTAINER_BASES


def library_api(qual: str) -> bool:
    """Whether a resolved name is one of a known framework's public names (see FRAMEWORK_NAMESPACES)."""
    return qual in _KNOWN_BASES or qual.rpartition(".")[0] in FRAMEWORK_NAMESPACES


# Library packages whose capitalised names are modules (`nn.Dense`, `eqx.nn.Linear`, `hk.Linear`).
MODULE_PACKAGES = ("flax.linen.", "flax.nnx.", "equinox.nn.", "haiku.")
# nnx Variables: their `.value` (or `[...]`) is an array leaf.
NNX_VARIABLES = frozenset({
    "flax.nnx.Param", "flax.nnx.Variable", "flax.nnx.BatchStat", "flax.nnx.Cache", "flax.nnx.Intermediate",
    "flax.nnx.VariableState", "flax.nnx.RngState", "flax.nnx.RngKey", "flax.nnx.RngCount",
})
# Lifted linen transforms applied to a Module class return a Module class running the same methods.
LINEN_CLASS_LIFTS = frozenset({
    "flax.linen.scan", "flax.linen.vmap", "flax.linen.remat", "flax.linen.checkpoint", "flax.linen.jit",
    "flax.linen.remat_scan", "flax.linen.map_variables",
})
# haiku's function transforms: name -> leading arguments of `.apply` that the function does not receive.
HAIKU_TRANSFORMS: dict[str, int] = {"haiku.transform": 2, "haiku.transform_with_state": 3}
HAIKU_WITHOUT_RNG = "haiku.without_apply_rng"
