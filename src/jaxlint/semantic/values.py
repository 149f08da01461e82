"""Traced-value propagation inside one traced function."""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Optional, Union

import libcst as cst

from ..jaxapi import (
    ARRAY_ANNOTATIONS,
    ARRAY_ATTRS,
    CONTAINER_ANNOTATIONS,
    LIST_FIRST_RETURNING,
    LIST_RETURNING,
    PARAMETER_GETTERS,
    STAGING_MODULES,
    STATIC_ATTRS,
    STATIC_CALLS,
    TREE_MAPS,
    TREE_REDUCES,
)
from ..syntax import container_path, _flatten, _is_literal, _returns, _target_names, dotted, iter_children
from .builder import _scalar_guard_names, arm_tests
from .frameworks import MODULE, MODULES, linen_variables_at
from .scopes import UNSTAGED, FunctionInfo, LoopInfo, Scope, dead_branch

if TYPE_CHECKING:
    from .model import ModuleModel


_BOOL_FUNCS = frozenset({
    "isnan", "isinf", "isfinite", "isposinf", "isneginf", "logical_and", "logical_or", "logical_not", "logical_xor",
    "less", "less_equal", "greater", "greater_equal", "equal", "not_equal", "isclose", "signbit", "isin",
})
_STATIC_NAME = re.compile(r"(^|_)(size|sizes|shape|shapes|ndim|len|length|dtype|count)(_|$)|^(is|has)_", re.I)
_SHAPE_NAME = re.compile(r"(^|_)(shape|shapes|ndim|dtype|dtypes)(_|$)", re.I)
# Calls returning (leaves, treedef): the treedef is a Python value.
_FLATTENS = frozenset({"jax.tree_util.tree_flatten", "jax.tree_util.tree_flatten_with_path", "jax.tree.flatten",
                       "jax.tree.flatten_with_path", "jax.tree_flatten"})  # (the last: the old alias)
DICT_METHODS = frozenset({"items", "keys", "values", "get"})
# Methods no JAX array has: a name they are called on holds a Python container.
_CONTAINER_METHODS = frozenset({"update", "setdefault", "append", "extend", "popitem"})
# Methods only strings have (no JAX or NumPy array, no pytree library object): the receiver is a string.
_STR_METHODS = frozenset({"startswith", "endswith", "lower", "upper", "strip", "lstrip", "rstrip", "isdigit",
                          "isalpha", "isidentifier", "casefold", "removeprefix", "removesuffix", "split", "rsplit",
                          "splitlines", "partition", "rpartition", "isnumeric", "isdecimal", "isspace", "zfill",
                          "capitalize", "title", "encode"})
_DICT_ANNOTATIONS = frozenset({"dict", "Dict", "Mapping", "MutableMapping", "FrozenDict"})
_COMPREHENSIONS = (cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)


# ---------------------------------------------------------------------------------------------
# Traced values inside one traced function: a flow-insensitive fixed point over its bindings.


class Values:
    def __init__(self, model: ModuleModel, fn: FunctionInfo) -> None:
        self.m = model
        self.fn = fn
        self._locals = fn.local_names
        self._static_override: set[str] = set()
        self._use_order: Optional[int] = None  # source-order stamp of the node asked about, in straight-line code
        self._use_arms: tuple[tuple[object, bool], ...] = ()  # the if arms around that node
        self._use_loop: Optional[LoopInfo] = None  # the innermost loop around it, if any

    def solve(self) -> None:
        fn = self.fn
        names = set(fn.traced_params)
        fn.traced_names = names
        trees = set(fn.pytree_params)
        fn.pytree_names = trees
        containers = {p.name for p in fn.params if p.annotation in CONTAINER_ANNOTATIONS
                      or p.annotation is not None and self.m.annotated_container(p.annotation_expr, fn.parent or self.m.root)
                      # `program_ids=()`: an array is never defaulted to a literal container
                      or isinstance(p.default, (cst.Tuple, cst.List, cst.Dict)) and not p.star
                      or p.star in ("*", "**")  # `*args` is a tuple, `**kwargs` a dict
                      or p.name in fn.param_elements}
        dicts = {p.name for p in fn.params if p.annotation in _DICT_ANNOTATIONS or p.star == "**"}
        for target, value, how in fn.events:
            if how == "=" and isinstance(target, cst.Name) and isinstance(value, (cst.Dict, cst.DictComp)):
                dicts.add(target.value)
            if isinstance(target, (cst.Tuple, cst.List)):  # `w, *rest = params`: `rest` is a Python list
                containers.update(el.value.value for el in target.elements
                                  if isinstance(el, cst.StarredElement) and isinstance(el.value, cst.Name))
                if how == "=" and isinstance(value, cst.Call) and target.elements \
                        and isinstance(target.elements[0].value, cst.Name) \
                        and self.m.resolve(value.func, fn) in LIST_FIRST_RETURNING:
                    containers.add(target.elements[0].value.value)  # `flat, treedef = jax.tree.flatten(x)`
            if how == "=" and isinstance(target, cst.Name) and isinstance(value, cst.Call) \
                    and (self.m.resolve(value.func, fn) in LIST_RETURNING or self.m.returns_container_call(value, fn)):
                containers.add(target.value)  # `leaves = jax.tree_util.tree_leaves(x)`: `if not leaves:` is static
        containers |= flax_collections(fn)
        fn.unpacked_names = {value.value for target, value, how in fn.events
                             if how == "=" and isinstance(value, cst.Name) and isinstance(target, (cst.Tuple, cst.List))
                             and len(target.elements) >= 2
                             and not any(isinstance(el, cst.StarredElement) for el in target.elements)}
        for call in fn.calls:  # `params.items()`, `batch.get("x")`, `len(xs)`: the name holds a container
            f = call.func
            if isinstance(f, cst.Attribute) and isinstance(f.value, cst.Name) and f.attr.value in DICT_METHODS:
                containers.add(f.value.value)
                dicts.add(f.value.value)
            elif isinstance(f, cst.Attribute) and isinstance(f.value, cst.Name) and f.attr.value in _CONTAINER_METHODS:
                containers.add(f.value.value)
            elif isinstance(f, cst.Name) and f.value == "len" and len(call.args) == 1 \
                    and isinstance(call.args[0].value, cst.Name):
                containers.add(call.args[0].value.value)
        for target, value, how in fn.events:  # `for i, g in enumerate(grads):` — grads is a sequence
            if how == "for" and value is not None:
                it = value
                if isinstance(it, cst.Call) and isinstance(it.func, cst.Name) and it.func.value in ("enumerate", "zip") \
                        and it.args:
                    it = it.args[0].value
                if isinstance(it, cst.Name):
                    containers.add(it.value)
        containers |= fn.string_keyed
        dicts |= fn.string_keyed
        fn.container_names = containers
        fn.dict_names = dicts
        straight = _straight_line_events(fn)
        # where each value is evaluated: its stamp and loop (a `for` target's iterable, once, before the loop)
        places = [(at, None) if at is not None else (order, loop)
                  for at, order, loop in zip(straight, fn.event_orders, _event_loops(fn))]
        dead = bool(fn.flags) or bool(fn.idents) or fn.passed is not None or bool(fn.left_none)
        bound: list[set[str]] = [set() for _ in fn.events]
        fn.event_traced = bound
        for _ in range(20):
            before = len(names) + sum(map(len, bound))
            before_trees = len(trees)
            for (target, value, how), (at, loop), arms, out in zip(fn.events, places, fn.event_branches, bound):
                if value is None or dead and self._dead_arm(arms):
                    continue  # (a binding in an arm no traced call takes: `if augment:` never passed True)
                # a value bound in straight-line code sees a name as bound before it: not a rebinding
                # further down (`shards = f(indices); ...; indices = jnp.array(indices)`) nor one in the
                # other arm of an `if`
                self._use_order, self._use_arms, self._use_loop = at, arms, loop
                if how in ("=", "for") and self.is_pytree(value):
                    for n in _target_names(target):
                        trees.add(n)
                if how == "for":
                    if isinstance(target, cst.Name) and (container_path(value), target.value) in fn.key_subscripts:
                        continue  # `for k in d: ... d[k]`: iterating a mapping gives its keys
                    self._bind(target, self._elements(value), out)
                elif how == "aug":
                    if isinstance(target, cst.Name) and self.traced(value):
                        out.add(target.value)
                else:
                    if isinstance(target, cst.Name) and isinstance(value, (cst.Dict, cst.List, cst.Tuple, cst.DictComp, cst.ListComp)):
                        containers.add(target.value)
                    self._bind(target, self._unpack(value), out)
                names |= out
            self._use_order, self._use_arms, self._use_loop = None, (), None
            if len(names) + sum(map(len, bound)) == before and len(trees) == before_trees:
                break

    def _dead_arm(self, arms: tuple[tuple[object, bool], ...]) -> bool:
        """Whether one of these `if` arms never runs traced: its test is a flag every traced call site gives
        one truth value (`augment=False` by default, never passed), or `x is None` for an `x` every site passes."""
        for node, arm in arms:
            test = self.m.if_tests.get(node) if isinstance(node, int) else None
            if test is None or test[1] is not self.fn:
                continue
            if dead_branch(self.fn, arm_tests(test[0], arm)):
                return True
        return False

    def _unpack(self, value: cst.BaseExpression) -> Union[bool, list]:
        if isinstance(value, (cst.Tuple, cst.List)) and not any(isinstance(e, cst.StarredElement) for e in value.elements):
            return [self._unpack(e.value) for e in value.elements]
        elements = self._param_elements(value)
        if elements is not None:  # `y, a, h0, has_h0 = res`: the residuals as the forward rule built them
            return list(elements)
        if isinstance(value, cst.Call):
            returned = self.m.call_returns(value, self)
            if returned is not None:  # `idx, n, is_local = helper(x)`: element by element
                return list(returned) if len(returned) > 1 else returned[0]
            qual = self.m.resolve(value.func, self.fn)
            if qual in _FLATTENS:  # `leaves, treedef = tree_flatten(x)`
                return [self.traced(value), False]
            static = self.m.ask("static_elements", qual, absent=None) if qual is not None else None
            if static is not None:  # a helper of another file whose summary says which elements are Python values
                whole = self.traced(value)
                return [whole and not s for s in static]
        return self.traced(value)

    def _param_elements(self, e: cst.BaseExpression) -> Optional[tuple[bool, ...]]:
        """Whether each element of a parameter that receives a tuple of known shape is traced (see
        `FunctionInfo.param_elements`), when `e` reads it and the body does not rebind it."""
        if isinstance(e, cst.Name) and e.value not in self.fn.assigned and e.value not in self._static_override:
            return self.fn.param_elements.get(e.value)
        return None

    def _elements(self, it: cst.BaseExpression) -> Union[bool, list]:
        """Tracedness of the elements produced by iterating `it` (per position when unpacked)."""
        if isinstance(it, cst.Call):
            fq = self.m.resolve(it.func, self.fn)
            if fq == "builtins.enumerate" and it.args:
                return [False, self._elements(it.args[0].value)]
            if fq is not None and fq.rsplit(".", 1)[-1] in ("zip", "safe_zip"):
                return [self._elements(a.value) for a in it.args]
            if fq == "builtins.range":
                return False  # Python ints: `range` of a tracer raises before the body runs (traced-shape)
            if fq in ("builtins.reversed", "builtins.sorted") and it.args \
                    or fq in ("builtins.list", "builtins.tuple") and len(it.args) == 1:
                return self._elements(it.args[0].value)  # (the same elements, in a list or another order)
            if isinstance(it.func, cst.Attribute) and not it.args:
                meth = it.func.attr.value
                if meth == "items":
                    return [False, self.traced(it.func.value)]
                if meth == "keys":
                    return False
                if meth == "values":
                    return self.traced(it.func.value)
        if isinstance(it, (cst.Tuple, cst.List)):
            rows = [e.value for e in it.elements]
            if rows and all(isinstance(r, cst.Tuple) and len(r.elements) == len(rows[0].elements) for r in rows):
                # `for name, a, b in [("i2t", x, y), ...]`: position by position
                return [any(self.traced(r.elements[i].value) for r in rows)  # type: ignore[attr-defined]
                        for i in range(len(rows[0].elements))]  # type: ignore[attr-defined]
            return any(self.traced(e.value) for e in it.elements)
        if isinstance(it, cst.Name) and it.value in self.fn.dict_names and it.value in self._locals:
            return False  # iterating a dict gives its keys: Python values even when the leaves are traced
        if isinstance(it, cst.Attribute) and self._dict_field(it):
            return False  # `for name in self.masks` with `masks: Dict[str, Array]`: the keys
        return self.traced(it)

    def _loop_binding(self, e: cst.Name) -> Optional[cst.For]:
        """The `for` loop of this function whose plain target binds the name read at `e`, with `e` in its
        body and nothing else in the body rebinding the name; None otherwise."""
        tables = self.m.__dict__.setdefault("_loop_targets", {})
        table = tables.get(id(self.fn))
        if table is None:
            table = tables[id(self.fn)] = {}
            if isinstance(self.fn.node, cst.FunctionDef):
                _index_loop_reads(self.fn.node.body, {}, table)
        return table.get(id(e))

    def _dict_field(self, e: cst.Attribute) -> bool:
        """Whether `obj.attr` is a field its class annotates as a dict (`masks: Dict[str, jax.Array]`)."""
        cls = self.m.class_of(e.value, self.fn)
        ann = cls.field_types.get(e.attr.value) if cls is not None else None
        if isinstance(ann, cst.Subscript):
            ann = ann.value
        name = ann.attr.value if isinstance(ann, cst.Attribute) else ann.value if isinstance(ann, cst.Name) else None
        return name in _DICT_ANNOTATIONS

    def _bind(self, target: cst.BaseExpression, value: Union[bool, list], names: set[str]) -> None:
        if isinstance(target, cst.Name):
            if value is True or (isinstance(value, list) and any(_flatten(value))):
                names.add(target.value)
            return
        if isinstance(target, (cst.Tuple, cst.List)):
            els = target.elements
            # (a longer list: a function returning tuples of several lengths, of which only those of this
            # length can be unpacked here)
            if isinstance(value, list) and len(value) >= len(els) and not any(isinstance(e, cst.StarredElement) for e in els):
                for el, v in zip(els, value):
                    self._bind(el.value, v, names)
            else:
                flag = value if isinstance(value, bool) else any(_flatten(value))
                for el in els:
                    self._bind(el.value, flag, names)
        elif isinstance(target, cst.StarredElement):
            self._bind(target.value, value, names)

    # ---- the question -----------------------------------------------------------------------

    def _scalar_guards(self, e: cst.BaseExpression) -> set[str]:
        """Names a true `e` proves concrete: the syntactic guards, and `not is_tracer(x)` through a module
        function that only returns `isinstance(arg, jax.core.Tracer)`."""
        names = set(_scalar_guard_names(e))
        if isinstance(e, cst.BooleanOperation) and isinstance(e.operator, cst.And):
            return names | self._scalar_guards(e.left) | self._scalar_guards(e.right)
        if isinstance(e, cst.UnaryOperation) and isinstance(e.operator, cst.Not):
            inner = e.expression
            if isinstance(inner, cst.BooleanOperation) and isinstance(inner.operator, cst.Or):
                # `not (is_tracer(p) or is_tracer(k))`: neither is a tracer
                return names | self._scalar_guards(cst.UnaryOperation(cst.Not(), inner.left)) \
                    | self._scalar_guards(cst.UnaryOperation(cst.Not(), inner.right))
            tested = self.m.tracer_tested(e.expression, self.fn)
            if tested is not None:
                names.add(tested)
        return names

    def _right_guards(self, e: cst.BooleanOperation) -> set[str]:
        """Names the right operand sees as Python values: `isinstance(n, int) and n == 1`, and
        `is_tracer(x) or x` (the right side is asked only when x is no tracer)."""
        if isinstance(e.operator, cst.And):
            return self._scalar_guards(e.left)
        tested = self.m.tracer_tested(e.left, self.fn)
        return {tested} if tested is not None else set()

    def name_traced(self, name: str) -> bool:
        if name in self._static_override or _SHAPE_NAME.search(name):
            return False  # `sample_shape`, `batch_size`, `ndim`: named for static facts
        fn = self.fn
        if name in self._locals:
            if name in fn.traced_names and self._use_order is not None:
                reaching = self._reaching(name)
                if reaching is not None:  # `if np.isnan(low): low = -jnp.ones_like(a)`: not yet rebound here
                    return any(name in fn.event_traced[i] for i in reaching)
            return name in fn.traced_names
        s = fn.parent
        while s is not None:
            if isinstance(s, FunctionInfo):
                if name in s.local_names:
                    return s.traced and name in s.traced_names
            elif s is self.m.root:
                return False
            s = s.parent
        return False

    def proven_object(self, e: cst.BaseExpression) -> bool:
        """A name an enclosing `isinstance` test proved an instance of a class that is no array type
        (`if isinstance(slot, Slot): table[slot]`): no tracer itself, so it can key a dict, whatever its
        attributes hold. So is a local bound only to what a method returns that every definition of that
        name in this module is annotated to return an instance of one of its classes (`slot = var.get_slot()`
        with `def get_slot(self) -> ParameterSlot`)."""
        if not isinstance(e, cst.Name):
            return False
        if f"instance:{e.value}" in self._static_override:
            return True
        fn = self.fn
        if e.value not in self._locals or fn.param(e.value) is not None:
            return False
        bound = [(t, v, how) for t, v, how in fn.events if e.value in _target_names(t)]
        return bool(bound) and all(how == "=" and isinstance(t, cst.Name) and isinstance(v, cst.Call)
                                   and self.m.returns_instance(v) for t, v, how in bound)

    def _attribute_traced(self, e: cst.Attribute) -> bool:
        cls = self.m.frameworks.instance_class(e.value, self.fn)
        if cls is not None and (e.attr.value not in ARRAY_ATTRS or self.m.frameworks.field(cls, e.attr.value)[0]):
            return self.m.frameworks.attribute_traced(self, e)  # a model module: its fields say
        if e.attr.value in ARRAY_ATTRS or self.is_pytree(e.value):
            return self.traced(e.value)
        # An attribute of a traced Python object is usually configuration, unless a model framework
        # says it is an array leaf (`self.weight` of an equinox Module, `self.w.value` in nnx).
        return self.m.frameworks.attribute_traced(self, e)

    def traced_at(self, e: cst.BaseExpression, call: cst.Call) -> bool:
        """Whether `e`, read in the arguments of `call`, is traced there: a name sees only the bindings
        made before that call (`n = shard(partial(check, n))(x)` reads the `n` given, not the result)."""
        order = self.m.call_order.get(id(call))
        if order is None:
            return self.traced(e)
        saved = self._use_order, self._use_arms, self._use_loop
        self._use_order, self._use_arms, self._use_loop = order, (), self.m.call_loops.get(id(call))
        try:
            return self.traced(e)
        finally:
            self._use_order, self._use_arms, self._use_loop = saved

    def traced(self, e: cst.BaseExpression) -> bool:  # noqa: C901 - one dispatch on node type
        if type(e) in _NEVER_TRACED:
            return False  # (before the `isinstance` chain, each failed test of which is slow on libcst's nodes)
        if isinstance(e, cst.Name):
            if not self.name_traced(e.value):
                return False
            loop = self._loop_binding(e)
            if loop is not None:  # inside `for mask in self.masks:` `mask` is the element, whatever else it was
                if (container_path(loop.iter), e.value) in self.fn.key_subscripts:
                    return False  # `for k in d: ... d[k]`: iterating a mapping gives its keys
                return any(_flatten(self._elements(loop.iter)))
            return True
        if isinstance(e, cst.Attribute):
            if e.attr.value in STATIC_ATTRS:
                return False
            if self.m.static_property(e, self.fn):
                return False  # `c.n` where `n` is a property returning `self.params.shape[0]`
            if self.m.class_constant(e.attr.value):
                return False  # `self._props` bound to `("loc", "vel")` in a class body
            static = self.m.is_static_field(e.value, e.attr.value, self.fn)
            if static:
                return False  # an aux-data field of a registered pytree: a Python value
            # (the project's static names, which read other files, are asked only of a traced attribute)
            return self._attribute_traced(e) and not (static is None and self.m.project_static_name(e.attr.value))
        if isinstance(e, cst.Subscript):
            if not self.is_pytree(e.value) and any(
                    isinstance(el.slice, cst.Index) and isinstance(el.slice.value, cst.SimpleString) for el in e.slice):
                return False  # obj["key"] on a Python object: arrays have no string keys
            elements = self._param_elements(e.value)
            index = e.slice[0].slice if len(e.slice) == 1 else None
            if elements is not None and isinstance(index, cst.Index) and isinstance(index.value, cst.Integer) \
                    and -len(elements) <= int(index.value.value) < len(elements):
                return elements[int(index.value.value)]  # `res[3]`: one residual
            if self.traced(e.value):
                return True
            if isinstance(e.value, cst.Attribute) and e.value.attr.value in STATIC_ATTRS:
                return False  # `x.shape[i]`, `arr.sizes[dim]`: an element of a tuple or dict of Python ints
            # `table[i]` with a traced `i`: a traced gather (or an error, which other rules report)
            return any(isinstance(el.slice, cst.Index) and self.traced(el.slice.value) for el in e.slice)
        if isinstance(e, cst.Call):
            return self._call_traced(e)
        if isinstance(e, cst.BinaryOperation):
            return self.traced(e.left) or self.traced(e.right)
        if isinstance(e, cst.UnaryOperation):
            if isinstance(e.operator, cst.Not):
                return False  # the bool() happens here; the result is a Python bool
            return self.traced(e.expression)
        if isinstance(e, cst.BooleanOperation):
            if self.traced(e.left):
                return True
            guarded = self._right_guards(e)
            if guarded:  # `isinstance(n, int) and n == 1`: n is a Python scalar on the right
                saved = self._static_override
                self._static_override = saved | guarded
                try:
                    return self.traced(e.right)
                finally:
                    self._static_override = saved
            return self.traced(e.right)
        if isinstance(e, cst.Comparison):
            return self._compare_traced(e)
        if isinstance(e, cst.IfExp):
            return self.traced(e.body) or self.traced(e.orelse)
        if isinstance(e, (cst.Tuple, cst.List, cst.Set)):
            return any(self.traced(el.value) for el in e.elements)
        if isinstance(e, cst.Dict):
            return any(isinstance(el, cst.DictElement) and self.traced(el.value) for el in e.elements)
        if isinstance(e, (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp)):
            return self._comprehension_traced(e)
        if isinstance(e, cst.NamedExpr):
            return self.traced(e.value)
        if isinstance(e, cst.StarredElement):
            return self.traced(e.value)
        if isinstance(e, cst.Await):
            return self.traced(e.expression)
        return False

    def _reaching(self, name: str) -> Optional[list[int]]:
        """The binding events of `name` that can reach the straight-line read being asked about: those
        before it, bar one in the other arm of an `if` around the read (`if ids: n = ... else: size = max(n)`).
        None when that says nothing: a name no parameter, with no such event (bound some other way)."""
        fn = self.fn
        use = self._use_order
        assert use is not None
        arms = dict(self._use_arms)
        if len(fn.event_traced) != len(fn.events):
            return None
        reaching = [i for i in _events_by_name(fn).get(name, ()) if fn.event_orders[i] < use
                    and not any(isinstance(node, int) and arms.get(node, arm) != arm for node, arm in fn.event_branches[i])]
        # The last plain assignment that runs whenever the read does (in the same block of straight-line
        # code, or of the loop body around the read, and in every `if` arm around it) hides those before.
        loops = _event_loops(fn)
        last = next((i for i in reversed(reaching) if fn.events[i][2] == "=" and loops[i] is self._use_loop
                     and all(not isinstance(node, int) or arms.get(node) == arm for node, arm in fn.event_branches[i])),
                    None)
        if last is not None:
            return self._past_none_tests(name, reaching[reaching.index(last):])
        if self._use_loop is not None or name in fn.traced_params:
            return None  # (a later pass's bindings reach the read too; a parameter is bound before them all)
        if not reaching and fn.param(name) is None:
            return None
        return self._past_none_tests(name, reaching)

    def _past_none_tests(self, name: str, reaching: list[int]) -> list[int]:
        """The events left once those that reach the read only as None are dropped: a binding followed, in
        its block, by `if name is not None: … return` (`n = shard(check)(x)`, then `if n is not None: return
        …`, then the read) is past that `if` only when it bound None."""
        fn = self.fn
        use = self._use_order
        assert use is not None
        tests = [(start, end, set(arms)) for start, end, tested, arms in fn.none_past if tested == name and end <= use]
        if not tests:
            return reaching
        return [i for i in reaching if not any(
            fn.event_orders[i] < start and arms <= set(fn.event_branches[i]) for start, _end, arms in tests)]

    def _comprehension_traced(self, e: Union[cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp]) -> bool:
        """A comprehension's variables belong to it: `[m for m in self.sizes]` is static even when another
        comprehension of the function binds `m` to traced values."""
        saved = self._static_override
        try:
            self._static_override = saved | self.comprehension_static(e)
            return self.traced(e.value) if isinstance(e, cst.DictComp) else self.traced(e.elt)
        finally:
            self._static_override = saved

    def comprehension_static(self, e: cst.BaseComp) -> set[str]:
        """The variables of a comprehension that iterate over nothing traced."""
        static: set[str] = set()
        saved = self._static_override
        try:
            level: Optional[cst.CompFor] = e.for_in
            while level is not None:
                self._static_override = saved | static
                if not any(_flatten(self._elements(level.iter))):
                    static |= set(_target_names(level.target))
                level = level.inner_for_in
        finally:
            self._static_override = saved
        return static

    def is_array_like(self, e: cst.BaseExpression, depth: int = 0) -> bool:
        """Whether a traced expression is evidently an array, not some object that holds tracers."""
        if depth > 6 or not self.traced(e):
            return False
        if _array_expression(e, self.m, self.fn):
            return True
        if isinstance(e, cst.Call):
            if isinstance(e.func, cst.Attribute) and self.is_array_like(e.func.value, depth + 1):
                return True
            # a traced result of a function of this module whose every return computes an array
            # (`self.cfl(i)` returning `dt / jnp.abs(u).max()`)
            ref = self.m.callee(e, self.fn)
            return ref is not None and isinstance(ref.fn.node, cst.FunctionDef) and _returns_arrays(ref.fn, self.m)
        if isinstance(e, cst.Subscript):
            return self.is_pytree(e.value) or self.is_array_like(e.value, depth + 1)
        if isinstance(e, cst.Attribute):
            return e.attr.value in ARRAY_ATTRS and self.is_array_like(e.value, depth + 1)
        if isinstance(e, cst.Name):
            p = self.fn.param(e.value)
            if p is not None:
                return p.annotation in ARRAY_ANNOTATIONS
            values = [v for t, v, how in self.fn.events if how == "=" and isinstance(t, cst.Name) and t.value == e.value]
            return bool(values) and all(v is not None and self.is_array_like(v, depth + 1) for v in values)
        return False

    def wrapper_objects(self, arg: cst.BaseExpression, call: cst.Call) -> bool:
        """`x = xarray_jax.Variable(dims, inputs); x = np.abs((x + 2) * (x - 3))`: NumPy's function of objects
        of a class that is not JAX's nor NumPy's, built from the traced values (or arithmetic of them): the
        class's own `__array_ufunc__` (or its error) decides, no tracer is converted."""
        fn = self.fn
        target = next((t for t, v, _how in fn.events if v is call), None)  # `x = np.abs(...)`
        if target is None:
            return False
        stack, names = [arg], set()
        while stack:
            e = stack.pop()
            if isinstance(e, cst.BinaryOperation):
                stack += [e.left, e.right]
            elif isinstance(e, cst.UnaryOperation):
                stack.append(e.expression)
            elif isinstance(e, cst.Name):
                names.add(e.value)
            elif not isinstance(e, (cst.Integer, cst.Float)):
                return False
        for name in names:
            before = fn.bindings(name, before=target)
            made = before[-1].value if before and before[-1].how == "=" else None
            if not isinstance(made, cst.Call):
                return False
            qual = self.m.resolve(made.func, fn) or ""
            head = (dotted(made.func) or "").rpartition(".")[2]
            if not head[:1].isupper() or qual.startswith(("jax.", "numpy.", "builtins.")):
                return False
        return bool(names)

    def is_pytree(self, e: cst.BaseExpression) -> bool:
        """Whether the expression is (part of) a pytree JAX flattened: a chain of subscripts and
        attributes rooted at such a parameter."""
        while isinstance(e, (cst.Attribute, cst.Subscript)):
            e = e.value
        if not isinstance(e, cst.Name):
            return False
        name = e.value
        if name in self._locals:
            return name in self.fn.pytree_names
        s = self.fn.parent
        while s is not None:
            if isinstance(s, FunctionInfo) and name in s.local_names:
                return s.traced and name in s.pytree_names
            s = s.parent
        return False

    def is_bool_array(self, e: cst.BaseExpression, depth: int = 0) -> bool:
        """Whether `e` is a traced boolean array (a mask): comparisons, `~`/`&`/`|` of masks,
        `jnp.isnan`-style predicates, `.astype(bool)`, or a name bound to one."""
        if depth > 8 or not self.traced(e):
            return False
        if isinstance(e, cst.Comparison):
            return True
        if isinstance(e, cst.UnaryOperation) and isinstance(e.operator, cst.BitInvert):
            return self.is_bool_array(e.expression, depth + 1)
        if isinstance(e, cst.BinaryOperation) and isinstance(e.operator, (cst.BitAnd, cst.BitOr, cst.BitXor)):
            return self.is_bool_array(e.left, depth + 1) or self.is_bool_array(e.right, depth + 1)
        if isinstance(e, cst.Call):
            q = self.m.resolve(e.func, self.fn)
            if q is not None and q.startswith("jax.numpy.") and q[len("jax.numpy."):] in _BOOL_FUNCS:
                return True
            if isinstance(e.func, cst.Attribute) and e.func.attr.value == "astype" and e.args:
                t = dotted(e.args[0].value) or ""
                return t.split(".")[-1] in ("bool", "bool_")
            return False
        if isinstance(e, cst.Name):
            values = [v for t, v, how in self.fn.events
                      if how == "=" and isinstance(t, cst.Name) and t.value == e.value]
            return bool(values) and all(v is not None and self.is_bool_array(v, depth + 1) for v in values)
        return False

    def truth_traced(self, e: cst.BaseExpression) -> bool:
        """Whether Python's truth test of `e` (in `if`, `while`, `and`, `not` ...) calls bool() on a tracer.

        `if params:` on a container is a static length test; a call to a function JAX does not
        define, used directly as a condition (`if is_array(x)`, `if not_tracer(i)`), is taken to be a
        Python predicate.
        """
        if isinstance(e, cst.BooleanOperation):
            if self.container_fallback(e):
                return False  # `carry or {}`: a container (or None) with an empty default
            if self.truth_traced(e.left):
                return True
            guarded = self._right_guards(e)
            saved = self._static_override
            self._static_override = saved | guarded
            try:
                return self.truth_traced(e.right)
            finally:
                self._static_override = saved
        if isinstance(e, cst.UnaryOperation) and isinstance(e.operator, cst.Not):
            return self.truth_traced(e.expression)
        if isinstance(e, cst.Name) and (e.value in self.fn.container_names or e.value in self.fn.unpacked_names):
            return False  # (`assert cache; key, value = cache`: a tuple, tested for presence)
        if isinstance(e, cst.Call) and self._is_predicate_call(e):
            return False
        if self._pytree_member(e):
            return False  # `if state.dynamic_scale:`: an optional sub-object of a pytree, tested for presence
        if self._submodules(e):
            return False  # `if not self.layers:`: a model module's tuple of blocks, tested for emptiness
        return self.traced(e)

    def _submodules(self, e: cst.BaseExpression) -> bool:
        """An attribute of a model module holding a submodule or a list or tuple of them: its truth is
        its presence or length, a Python value (a module itself has no truth of its own under JAX)."""
        if not isinstance(e, cst.Attribute):
            return False
        cls = self.m.frameworks.instance_class(e.value, self.fn)
        return cls is not None and self.m.frameworks.field(cls, e.attr.value)[0] in (MODULE, MODULES)

    def container_fallback(self, e: cst.BooleanOperation) -> bool:
        """`x or {}`, `x or []`, `x or StreamDict()`: a default of a container or an object of some class
        says what `x` is (a container or object, or None); an array would never be defaulted so."""
        if not isinstance(e.operator, cst.Or):
            return False
        right = e.right
        if isinstance(right, (cst.Dict, cst.List, cst.Tuple, cst.Set, cst.DictComp, cst.ListComp, cst.SetComp)):
            return True
        if isinstance(right, cst.Call):
            qual = self.m.resolve(right.func, self.fn) or ""
            if qual in ("builtins.dict", "builtins.list", "builtins.tuple", "builtins.set"):
                return True
            last = right.func.attr.value if isinstance(right.func, cst.Attribute) else (
                right.func.value if isinstance(right.func, cst.Name) else "")
            return last[:1].isupper() and not qual.startswith(STAGING_MODULES)
        return False

    def _pytree_member(self, e: cst.BaseExpression) -> bool:
        """An attribute of a flattened pytree (directly, or a name bound only to one)."""
        if isinstance(e, cst.Attribute):
            return e.attr.value not in ARRAY_ATTRS and self.is_pytree(e.value)
        if isinstance(e, cst.Name) and e.value in self._locals and self.fn.param(e.value) is None:
            values = [v for t, v, how in self.fn.events if isinstance(t, cst.Name) and t.value == e.value]
            return bool(values) and all(v is not None and isinstance(v, cst.Attribute) and self._pytree_member(v)
                                        for v in values)
        return False

    def _is_predicate_call(self, e: cst.Call) -> bool:
        qual = self.m.resolve(e.func, self.fn)
        if qual is not None and (qual.startswith(STAGING_MODULES) or qual == "builtins.bool"):
            return False
        if isinstance(e.func, cst.Attribute) and self.traced(e.func.value):
            return False  # x.any(), x.all()
        returned = self.m.call_returns(e, self)
        if returned is not None:
            return not any(returned)  # `if converged(h, tol):` returns a traced comparison
        return True

    def _compare_traced(self, e: cst.Comparison) -> bool:
        operands = [e.left] + [c.comparator for c in e.comparisons]
        for c in e.comparisons:
            if isinstance(c.operator, (cst.Is, cst.IsNot, cst.In, cst.NotIn)):
                return False
        if any(isinstance(o, (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)) for o in operands):
            return False
        if any(isinstance(o, cst.Name) and o.value == "None" for o in operands):
            return False
        equality = len(operands) == 2 and isinstance(e.comparisons[0].operator, (cst.Equal, cst.NotEqual))
        if equality and any(isinstance(o, cst.Dict) and not o.elements for o in operands):
            # `stats != {}`: a mapping's equality with the empty dict compares keys only, never a leaf (and
            # an array refuses the comparison with a TypeError): a Python bool
            return False
        if equality and any(self.m.plain_enum_member(o, self.fn) for o in operands):
            return False  # `impl == Impl.WARP` with a plain Enum: a Python bool whatever `impl` is
        if equality and any(self._sure_container(o) for o in operands):
            # a tuple or dict compared with anything but another container is unequal without a look at
            # its leaves (`pair == ignore` with a tuple `pair` is False; an array's `==` refuses a tuple)
            other = operands[1] if self._sure_container(operands[0]) else operands[0]
            if not isinstance(other, (cst.Tuple, cst.List, cst.Dict)) and not self._sure_container(other):
                return False
        return any(self.traced(o) for o in operands)

    def _sure_container(self, e: cst.BaseExpression) -> bool:
        """A parameter that every call site fills with a Python tuple, list or dict, or that receives a
        tuple wherever the function runs, not rebound in the body."""
        return isinstance(e, cst.Name) and e.value not in self.fn.assigned and (
            e.value in self.fn.site_containers or e.value in self.fn.param_elements)

    def _unstaged(self) -> bool:
        """Whether the function is traced only by transforms that stage nothing (`jax.vmap(f)(xs)`, not
        inside a jit or a loop primitive): there a JAX call on Python values computes a concrete array."""
        fn = self.fn
        return fn.traced and not fn.cached and not fn.staged and bool(fn.transforms) \
            and fn.transforms <= UNSTAGED | {"helper"}

    def _call_traced(self, e: cst.Call) -> bool:
        f = e.func
        if self.fn.python_kwargs and isinstance(f, cst.Attribute) and f.attr.value in ("pop", "get") \
                and isinstance(f.value, cst.Name) and any(p.star == "**" and p.name == f.value.value for p in self.fn.params) \
                and len(e.args) == 2 and not any(a.keyword or a.star for a in e.args) and _is_literal(e.args[1].value):
            return False  # `kw.pop("flag", False)` under an equinox filter transform: a Python value
        qual = self.m.resolve(e.func, self.fn)
        if qual is not None:
            if qual in STATIC_CALLS:
                return False
            if qual.startswith("numpy.") or qual.startswith("math."):
                return False  # conversion to NumPy fails on a tracer, or the call is static
            if qual in ("builtins.set", "builtins.frozenset"):
                return False  # tracers are unhashable: a set built under a trace holds keys or static values
            if qual == "jax.lax.psum" and e.args and _is_literal(e.args[0].value):
                return False  # psum of a Python constant is the axis size times it, a Python number
            if qual == "jax.lax.stop_gradient" and self.m.differentiated_only(self.fn):
                return False  # under `grad` alone the value it stops is the primal: a concrete array
            if id(e) in self.m.eager_calls and qual.startswith(STAGING_MODULES):
                # under `jax.ensure_compile_time_eval()`: concrete unless given a tracer
                return any(self.traced(a.value) for a in e.args)
            if qual.startswith(STAGING_MODULES) and self._unstaged():
                # under `vmap` or `grad` alone nothing is staged: a jnp call on Python values runs eagerly
                return any(self.traced(a.value) for a in e.args)
            if qual.startswith(STAGING_MODULES) or qual in PARAMETER_GETTERS:
                return True
            if qual == "builtins.getattr" and len(e.args) >= 2:
                obj, attr = e.args[0].value, e.args[1].value
                if isinstance(attr, cst.SimpleString) and attr.evaluated_value in STATIC_ATTRS:
                    return False
                return self.is_pytree(obj) and self.traced(obj)
        func = e.func
        returned = self.m.call_returns(e, self)
        if returned is not None:
            return any(returned)  # the helper's summary for these arguments, not a guess from names
        if qual is not None and self.m.ask("static_return", qual, absent=False):
            return False  # a helper of another project file that returns only shape facts
        callee = func.attr.value if isinstance(func, cst.Attribute) else (func.value if isinstance(func, cst.Name) else "")
        if _STATIC_NAME.search(callee) and (qual is None or not qual.startswith(STAGING_MODULES)):
            return False  # `pytree_size(x)`, `get_shape(x)`: functions named for static facts
        if isinstance(func, cst.Attribute):
            if func.attr.value in ("keys", "__len__") or func.attr.value in _STR_METHODS:
                return False  # `k.startswith("w")`: arrays have no such method, the receiver is a string
            if self.m.ask("static_method", func.attr.value, absent=False):
                return False  # every method of this name in the project returns a shape fact
            if self.m.static_unwrap(e):
                return False  # genjax's `Const.unwrap()`: a Python value kept in the treedef
            if func.attr.value in ("item", "tolist"):
                return False  # `loss.item()`: a Python number (a tracer's raises there, flagged as a conversion)
            if self.traced(func.value):
                return True  # a method of a traced value: x.sum(), x.astype(...)
        if (qual in TREE_MAPS or qual == "builtins.map") and len(e.args) > 1:
            if self.m.resolve(e.args[0].value, self.fn) in STATIC_CALLS:
                return False  # `tree_map(jnp.isrealobj, params)`, `map(jnp.shape, xs)`: Python facts per leaf
            ref = self.m.resolve_callable(e.args[0].value, self.fn)
            if ref is not None and isinstance(ref.fn.node, (cst.FunctionDef, cst.Lambda)):
                # the result holds what the callback returns given these trees' leaves (or elements);
                # asked before the callback is marked traced too, so an early round's guess cannot stick
                given = [p.name for p in ref.fn.params[ref.offset:] if p.name not in ref.bound_names]
                trees = [a.value for a in e.args[1:] if a.keyword is None and not a.star]
                returned = self.m.returns_given(ref.fn, {p for p, t in zip(given, trees) if self.traced(t)})
                return any(returned) if returned is not None else any(self.traced(t) for t in trees)
        if qual in TREE_REDUCES and len(e.args) > 1:
            # `tree_reduce(lambda n, x: n + x.size, tree, 0)`: what the callback returns from the initial
            # value and a leaf, then from its own result and a leaf
            ref = self.m.resolve_callable(e.args[0].value, self.fn)
            given = [p.name for p in ref.fn.params[ref.offset:] if p.name not in ref.bound_names] if ref else []
            if ref is not None and isinstance(ref.fn.node, (cst.FunctionDef, cst.Lambda)) and len(given) == 2:
                tree = self.traced(e.args[1].value)
                acc = self.traced(e.args[2].value) if len(e.args) > 2 else tree
                returned = self.m.returns_given(ref.fn, {p for p, t in zip(given, (acc, tree)) if t})
                if returned is not None:  # (static from a static start: static all the way)
                    return any(returned)
        return any(self.traced(a.value) for a in e.args)


def flax_collections(fn: FunctionInfo) -> set[str]:
    """Names bound to one collection of a flax variables dict (`cache = mutables.get("cache")` after
    `out, mutables = model.apply(v, x, mutable=["cache"])`): a dict of a module's variables, whose truth
    is its emptiness."""
    variables: set[str] = set()
    for target, value, how in fn.events:
        at = linen_variables_at(value) if how == "=" and value is not None else None
        if at == -1 and isinstance(target, cst.Name):
            variables.add(target.value)
        elif at is not None and at >= 0 and isinstance(target, (cst.Tuple, cst.List)) and len(target.elements) > at \
                and isinstance(target.elements[at].value, cst.Name):
            variables.add(target.elements[at].value.value)  # type: ignore[attr-defined]
    out: set[str] = set()
    for target, value, how in fn.events:
        if how != "=" or not isinstance(target, cst.Name):
            continue
        if isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value == "get" \
                and value.args and isinstance(value.args[0].value, cst.SimpleString):
            holder = value.func.value
        elif isinstance(value, cst.Subscript) and len(value.slice) == 1 and isinstance(value.slice[0].slice, cst.Index) \
                and isinstance(value.slice[0].slice.value, cst.SimpleString):
            holder = value.value
        else:
            continue
        if isinstance(holder, cst.Name) and holder.value in variables:
            out.add(target.value)
    return out


def _events_by_name(fn: FunctionInfo) -> dict[str, list[int]]:
    """The binding events of `fn` of each name it binds, by index in `events`, in source order."""
    found = fn.__dict__.get("_events_by_name")
    if found is None or found[0] != len(fn.events):
        table: dict[str, list[int]] = {}
        for i, (target, _value, _how) in enumerate(fn.events):
            for name in _target_names(target):
                table.setdefault(name, []).append(i)
        found = fn.__dict__["_events_by_name"] = (len(fn.events), table)
    return found[1]


def _event_loops(fn: FunctionInfo) -> list[Optional[LoopInfo]]:
    """For each binding event of `fn`: the innermost loop of the body around it (None in straight-line
    code; a `for` target belongs to its own loop)."""
    found = fn.__dict__.get("_event_loops")
    if found is None or len(found) != len(fn.events):
        found = []
        for (target, _value, _how), at in zip(fn.events, fn.event_orders):
            names = _target_names(target)
            found.append(next((loop for name in names for order, loop in zip(fn.bind_order.get(name, []),
                                                                              fn.bind_loops.get(name, []))
                               if order == at), None))
        fn.__dict__["_event_loops"] = found
    return found


def _straight_line_events(fn: FunctionInfo) -> list[Optional[int]]:
    """For each binding event of `fn`: its source-order stamp when it runs in straight-line code (no
    loop around it in the body), else None."""
    out: list[Optional[int]] = []
    for (target, _value, how), at, loop in zip(fn.events, fn.event_orders, _event_loops(fn)):
        # a `for` target's iterable is evaluated once, before its own loop starts
        if loop is not None and how == "for" and loop.parent is None and isinstance(loop.node, cst.For) \
                and loop.node.target is target:
            loop = None
        out.append(None if loop is not None or not _target_names(target) else at)
    return out


def _rebinds(body: cst.CSTNode, name: str) -> bool:
    """Whether a loop body binds `name` again (assignment, loop or `with` target, walrus), not counting
    nested functions and classes."""
    stack: list[cst.CSTNode] = [body]
    while stack:
        n = stack.pop()
        if isinstance(n, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            continue
        targets: list[cst.BaseExpression] = []
        if isinstance(n, cst.Assign):
            targets = [t.target for t in n.targets]
        elif isinstance(n, (cst.AugAssign, cst.AnnAssign, cst.For, cst.CompFor)):
            targets = [n.target]
        elif isinstance(n, cst.WithItem) and n.asname is not None:
            targets = [n.asname.name]
        elif isinstance(n, cst.NamedExpr):
            targets = [n.target]
        if name in {t for target in targets for t in _target_names(target)}:
            return True
        stack.extend(iter_children(n))
    return False


_SCOPES = (cst.FunctionDef, cst.ClassDef, cst.Lambda)
# Expressions that are never traced values: literals (an f-string formats a tracer into a str) and lambdas.
_NEVER_TRACED = frozenset({cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString, cst.ConcatenatedString,
                           cst.FormattedString, cst.Ellipsis, cst.Lambda})


def _index_loop_reads(node: cst.CSTNode, active: dict[str, cst.For], table: dict[int, cst.For]) -> None:
    """Record, for each name read inside a `for NAME in ...:` body that does not rebind NAME, that loop."""
    # (exact type tests: the node classes are final, and a failed `isinstance` on them is slow)
    tp = type(node)
    if tp in _SCOPES:
        return
    if tp is cst.Name:
        loop = active.get(node.value)  # type: ignore[attr-defined]
        if loop is not None:
            table[id(node)] = loop
        return
    if tp is cst.Attribute:  # (`self.mask` reads the attribute, not the name)
        _index_loop_reads(node.value, active, table)  # type: ignore[attr-defined]
        return
    if tp is cst.For:
        assert isinstance(node, cst.For)
        _index_loop_reads(node.iter, active, table)
        inner = active
        if isinstance(node.target, cst.Name) and not _rebinds(node.body, node.target.value):
            inner = {**active, node.target.value: node}
        else:
            inner = {k: v for k, v in active.items() if k not in set(_target_names(node.target))}
        _index_loop_reads(node.body, inner, table)
        if node.orelse is not None:
            _index_loop_reads(node.orelse, active, table)
        return
    for child in iter_children(node):
        _index_loop_reads(child, active, table)


def _returns_arrays(fn: "FunctionInfo", m: "ModuleModel") -> bool:
    """Whether every `return` of a def computes an array: arithmetic, or a call of jax/jnp (`return dt /
    jnp.abs(u).max()`), read from its text (a summary, asked of a call whose result is traced)."""
    known = m.__dict__.setdefault("_array_returning", {})
    if id(fn) not in known:
        values = [r.value for r in _returns(fn.node.body)]  # type: ignore[union-attr]
        known[id(fn)] = bool(values) and all(v is not None and _array_expression(v, m, fn) for v in values)
    return known[id(fn)]


def _array_expression(e: cst.BaseExpression, m: "ModuleModel", scope: "Scope") -> bool:
    """Arithmetic, or a call of jax/jnp: what computes an array when anything in it is traced."""
    if isinstance(e, (cst.BinaryOperation, cst.UnaryOperation)):
        return True
    return isinstance(e, cst.Call) and (m.resolve(e.func, scope) or "").startswith(STAGING_MODULES)
