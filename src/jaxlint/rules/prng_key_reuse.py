"""prng-key-reuse: the same PRNG key consumed twice without being replaced."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Container, Optional, Union

import libcst as cst

from ..jaxapi import KEY_MAKERS
from ..semantic import FunctionInfo, Param, Scope
from ..semantic.keys import (
    consumed_elsewhere, consumed_when, draws_nothing, handed, imported_handoffs, key_arg, key_consumers, key_ref,
    names_of, param_handoffs, signature,
)
from ..syntax import _arg, _target_names, children, code_of, contains, descendants, dotted, iter_children, plain_annotation
from .base import Report, Rule, Where

_KEY_NAME = re.compile(r"(^|_)(key|rng|prng|rng_key|prng_key)s?(\d*)($|_)", re.IGNORECASE)
_KEY_ENDING = re.compile(r"(key|rng)s?\d*$", re.IGNORECASE)
_KEY_ANNOTATIONS = {"PRNGKeyArray", "KeyArray", "PRNGKey", "Key"}
# Random generators with their own state: each draw advances them, so passing one twice is no reuse.
_STATEFUL_GENERATORS = frozenset({"numpy.random.Generator", "numpy.random.RandomState", "random.Random"})
_EXITS = (cst.Return, cst.Raise, cst.Continue, cst.Break)
_EXIT_TYPES = frozenset(_EXITS)
# Exact types (libcst's concrete node classes have no subclasses): cheaper than isinstance on them.
_NEW_SCOPES = frozenset({cst.FunctionDef, cst.ClassDef, cst.Lambda})


@dataclass
class _State:
    keys: set[str] = field(default_factory=set)  # names known to hold keys
    consumed: dict[str, cst.CSTNode] = field(default_factory=dict)  # key name -> first consuming call
    # key name -> {code of the data folded in -> the fold_in call}: distinct data derive distinct keys
    folded: dict[str, dict[str, cst.CSTNode]] = field(default_factory=dict)
    # key name -> (name or attribute, literal, `==`?) when the key was consumed only under `if x == literal:`
    # (or `x != literal`): a body under an exclusive test did not run
    exclusive: dict[str, tuple[str, str, bool]] = field(default_factory=dict)
    # key name -> an imported function it was handed to, while the project's summaries are not known
    handed: dict[str, str] = field(default_factory=dict)

    def copy(self) -> "_State":
        return _State(set(self.keys), dict(self.consumed), {k: dict(v) for k, v in self.folded.items()},
                      dict(self.exclusive), dict(self.handed))

    def merge(self, other: "_State") -> None:
        self.keys |= other.keys
        for k, q in other.handed.items():
            self.handed.setdefault(k, q)
        for k, v in other.consumed.items():
            self.consumed.setdefault(k, v)
        for k, d in other.folded.items():
            for data, call in d.items():
                self.folded.setdefault(k, {}).setdefault(data, call)


class PrngKeyReuse(Rule):
    """
    ## What it does
    Flags a PRNG key consumed a second time without a new key in between: two `jax.random` samplers
    on one key, a key split twice, a key sampled from and then split, or a sampler inside a loop on a
    key the loop never replaces. `split` consumes the key it is given, and so does a distribution's
    `sample(seed=key)` (distrax, TensorFlow Probability, numpyro) and a function of the module that samples
    from or splits a key handed to it, positionally or by keyword. A draw whose result is never read (or
    only read for its shape, or only as an example input of a module's `init`, which reads its shape and
    dtype), two draws a test compares on purpose, and the arms of `if kind == "a":` /
    `if kind == "b":` are not reuse, nor is a key read in an arm that runs on one pass of its loop
    (`if t == 0:` in `for t in range(n)`), nor are the draws of a custom derivative rule (`@f.defjvp`,
    `f.defvjp(fwd, bwd)`), which replays the primal's draws with the primal's key. `fold_in(key, i)` derives a new
    key and draws nothing from `key`, but it equals `split(key, n)[i]` for every n > i (partitionable
    threefry, JAX's default), so it is flagged after `split(key, n)` unless `i` is `n` itself, and when
    the same data is folded in twice. Both `jax.random.key` and `jax.random.PRNGKey` keys are tracked.
    Anywhere, not only in traced code.

    ## Why is this bad?
    JAX's random numbers are a pure function of the key: the same key gives the same numbers. Reusing
    a key silently correlates things that should be independent (dropout masks, initialisations,
    noise), or repeats the same "random" draw on every loop iteration.

    ## Example
    ```python
    import jax

    key = jax.random.key(0)
    w = jax.random.normal(key, (3,))
    b = jax.random.normal(key, (3,))
    ```

    ## Use instead
    ```python
    import jax

    key = jax.random.key(0)
    key_w, key_b = jax.random.split(key)
    w = jax.random.normal(key_w, (3,))
    b = jax.random.normal(key_b, (3,))
    ```

    ## How it is verified
    Where the function can be run, `jax.config.update("jax_debug_key_reuse", True)` makes JAX raise
    `KeyReuseError` at the flagged line (for new-style `jax.random.key` keys).

    ## Known limitations
    Keys are followed within one function, and into the functions it is handed to: those of the same
    module, and those of other files of the project the run is given (a lone file's imports are not
    read). `fold_in(key, i)` inside a loop is the idiomatic way to derive per-iteration keys and is
    not flagged.

    ## References
    - https://docs.jax.dev/en/latest/random-numbers.html
    - https://docs.jax.dev/en/latest/jax.experimental.key_reuse.html
    """

    code = "JL501"
    name = "prng-key-reuse"
    summary = "PRNG key used twice"
    anywhere = True

    def visit_Module(self, node: cst.Module, where: Where) -> None:
        self._analyse(node.body, where.scope, where, initial=set())

    def visit_FunctionDef(self, node: cst.FunctionDef, where: Where) -> None:
        fn = where.model.fn_of_node.get(id(node))
        if fn is None:
            return
        if id(fn) in where.model.derivative_rule_functions():
            return  # a custom derivative rule replays the primal's draws: its key must draw what the primal drew
        initial = {p.name for p in fn.params if (_KEY_NAME.search(p.name) or p.annotation in _KEY_ANNOTATIONS)
                   and not self._stateful_generator(p, fn, where)}
        if not initial and not any(_KEY_NAME.search(n) for n in fn.assigned) and not any(
                (where.model.resolve(c.func, fn) or "").startswith("jax.random.") for c in fn.calls):
            return  # no key enters this body: no parameter, binding or `jax.random` call can hold one
        body = node.body.body if isinstance(node.body, cst.IndentedBlock) else [node.body]
        self._analyse(body, fn, where, initial)

    def _stateful_generator(self, p: Param, fn: FunctionInfo, where: Where) -> bool:
        """`rng: np.random.Generator`: a NumPy or Python generator, which advances on every draw, not a key."""
        ann = plain_annotation(p.annotation_expr)
        return ann is not None and where.model.resolve(ann, fn) in _STATEFUL_GENERATORS

    # ---- the analysis -----------------------------------------------------------------------

    def _analyse(self, body: object, scope: Scope, where: Where, initial: set[str]) -> None:
        self._scope = scope
        self._where = where
        self._body = list(body)  # type: ignore[call-overload]
        self._events: Optional[list[tuple[str, object]]] = None
        self._comprehension_roots: dict[int, bool] = {}  # statement -> whether it holds a comprehension
        self._example_inputs: Optional[set[int]] = None  # see `_example_input`
        self._fn = scope if scope is not where.model.root else None
        self._sourced: set[str] = set()  # names this body binds from a key source (split, PRNGKey ...)
        self._block(list(body), _State(keys=set(initial)), loop_names=None)  # type: ignore[arg-type]

    def _random_fn(self, call: cst.Call) -> Optional[str]:
        q = self._where.model.resolve(call.func, self._scope)
        if q is None or not q.startswith("jax.random."):
            return None
        name = q[len("jax.random."):]
        return None if name in KEY_MAKERS or "." in name else name

    def _is_key_source(self, value: cst.BaseExpression) -> bool:
        if isinstance(value, cst.Call):
            q = self._where.model.resolve(value.func, self._scope) or ""
            return q in ("jax.random.PRNGKey", "jax.random.key", "jax.random.split", "jax.random.fold_in",
                         "jax.random.clone", "jax.random.wrap_key_data")
        if isinstance(value, cst.Subscript):
            ref = key_ref(value.value)
            return ref is not None and ref in self._state_keys
        return False

    def _calls_in(self, node: cst.CSTNode, arms: bool = False) -> list:
        """Calls in evaluation order (arguments before the call), not entering nested scopes; with `arms`,
        a conditional expression inside is given whole, in its place, for its arms to be taken apart."""
        out: list = []

        def walk(n: cst.CSTNode) -> None:
            tp = type(n)
            if tp in _NEW_SCOPES:
                return
            if arms and tp is cst.IfExp:
                out.append(n)
                return
            for child in children(n):
                walk(child)
            if tp is cst.Call:
                out.append(n)

        walk(node)
        return out

    def _consumers(self) -> dict[int, set[str]]:
        """Functions of this module that consume a key parameter: id of the function -> those parameters."""
        return key_consumers(self._where.model)

    def _callee(self, call: cst.Call, scope: Scope) -> Optional[tuple[FunctionInfo, int]]:
        """The function of this module a call runs, and the number of leading parameters already bound."""
        ref = self._where.model.callee(call, scope)
        return (ref.fn, ref.offset) if ref is not None else None

    def _consume(self, call: cst.Call, state: _State, loop_names: Optional[Container[str]],
                 root: Optional[cst.CSTNode] = None) -> None:
        if not _hands_a_key(call, state.keys) and not (
                root is not None and any(key_ref(a.value) is not None for a in call.args) and self._has_comprehension(root)):
            return  # (every way below takes the key from the call's arguments; in a comprehension binding
            # the name handed, from the collection the comprehension runs over)
        fname = self._random_fn(call)
        keys: list[str] = []
        if fname is not None and draws_nothing(call, fname):
            return  # `randint(key, shape, 0, 1)`: zeros whatever the key, so nothing is drawn from it
        if fname is not None:
            key = key_arg(call)
            keys = [key] if key is not None else []
        else:
            callee = self._callee(call, self._scope)
            if callee is None:
                key = _sampled_key(call)  # `dist.sample(seed=key)`: a distribution draws from the key
                if key is not None:
                    self._consume_key(call, key, call.func.attr.value, state, loop_names, root)  # type: ignore[attr-defined]
                    return
                # `utils.sample_noise(key, shape)`: a function of another project file that consumes it
                model = self._where.model
                for key in consumed_elsewhere(call, model, self._scope):
                    self._consume_key(call, key, code_of(call.func), state, loop_names, root)
                if model.alone:  # (what is handed on shows only in the calls to ask the project about)
                    for qual, key in imported_handoffs(call, model, self._scope, self._sure_keys(state)):
                        self._hand_off(qual, key, state, loop_names)
                return
            if id(callee[0]) not in self._consumers():
                model = self._where.model
                hands = param_handoffs(callee[0], model) if model.alone else {}  # (as above)
                if hands:  # `get_batch(cfg, key)`, a function of this module handing `key` to the project's
                    sure = self._sure_keys(state)
                    for param, key in handed(call, signature(callee[0]), callee[1], refs=True):
                        if param in hands and key.split("[")[0] in sure:
                            self._hand_off(hands[param], key, state, loop_names)
                return
            fname = callee[0].name
            wanted = self._consumers()[id(callee[0])]
            keys = [ref for param, ref in handed(call, signature(callee[0]), callee[1], refs=True) if param in wanted
                    and consumed_when(call, callee[0], callee[1], param, self._where.model)]
        for key in keys:
            self._consume_key(call, key, fname, state, loop_names, root)

    def _sure_keys(self, state: _State) -> set[str]:
        # (a name bound from `split`/`PRNGKey` here, or one that ends like a key — `key`, `dropout_rng` —
        # not any key-like name: `rng_filters` holds something else)
        return {k for k in state.keys if k in self._sourced or _KEY_ENDING.search(k)}

    def _hand_off(self, qual: str, key: str, state: _State, loop_names: Optional[Container[str]]) -> None:
        """A key handed to a function of another project file, known without the project's summaries: note
        the function where the key is used again (or on every pass of a loop), so the file is analysed
        again with them."""
        again = key in state.handed or key in state.consumed or (
            loop_names is not None and key.split("[")[0] not in loop_names)
        if again:
            self._where.model.key_handoffs.update({qual, state.handed.get(key, qual)})
        state.handed[key] = qual

    def _consume_key(self, call: cst.Call, key: str, fname: str, state: _State,
                     loop_names: Optional[Container[str]], root: Optional[cst.CSTNode]) -> None:
        if root is not None and self._has_comprehension(root):
            use, source = self._comprehension_use(call, root, key)
            if use == "own":
                # `[normal(rng) for rng, n in zip(rngs, sizes)]`: a different `rng` on each pass, and
                # the keys of `rngs` are what gets consumed
                if source is not None and source != key:
                    self._consume_key(call, source, fname, state, None, None)
                return
        if not _held(key, state.keys):
            return
        if key in state.handed:  # handed to an imported function before: its summary decides
            self._where.model.key_handoffs.add(state.handed[key])
        if fname == "fold_in":
            # `fold_in(key, i)` is `split(key, n)[i]` for every n > i (partitionable threefry, JAX's
            # default): after `split(key, n)` it repeats one of the split's keys unless i >= n. It draws
            # nothing from `key` itself, so a sampler on `key` and `fold_in` do not collide.
            data = code_of(call.args[1].value) if len(call.args) > 1 else ""
            first = state.consumed.get(key)
            if isinstance(first, cst.Call) and self._where.model.resolve(first.func, self._scope) == "jax.random.split" \
                    and not _folds_past_split(first, call):
                self._report(call, f"`{key}` was already split by `jax.random.split`, and `fold_in(key, i)` "
                             "equals `split(key, n)[i]` for i < n; use one of the split keys instead.", key, first)
                return
            folds = state.folded.setdefault(key, {})
            if data in folds:
                self._report(call, f"`{key}` was already folded in with the same data `{data}`, which derives the "
                             "same key again; fold in distinct data or split it.", key, folds[data])
            folds.setdefault(data, call)
            return
        if fname == "split" and state.folded.get(key):
            for fold in state.folded[key].values():
                if not _folds_past_split(call, fold):  # `split(key, n)[i]` is the `fold_in(key, i)` made before
                    self._report(call, f"`{key}` was already folded in by `{_callee(fold)}`, and `split(key, n)[i]` "
                                 "equals `fold_in(key, i)` for i < n; split it once and use the split keys.", key, fold)
                    return
        aligning = fname in _ALIGNING and (
            key not in state.consumed or isinstance(state.consumed[key], cst.Call)
            and self._random_fn(state.consumed[key]) in _ALIGNING)  # type: ignore[arg-type]
        if aligning and key in state.consumed:
            return  # `x = permutation(key, x); y = permutation(key, y)`: rows of x and y stay paired
        if self._example_input(call):
            return  # `model.init(key, normal(key, shape))`: only the draw's shape and dtype matter
        first = state.consumed.get(key)
        if first is not None and self._draw_unused(first, self._random_fn(first) if isinstance(first, cst.Call) else None,
                                                   loop_names, overwritten=True):
            # the first result was thrown away, or is only looked at for its shape: nothing is drawn twice
            # by this call (on a later pass of a loop it still may be, below)
            del state.consumed[key]
            first = None
        if first is not None:
            if self._compared(first, call):
                return  # `assert_allclose(a, b)` of two draws from one key: the same numbers are the point
            if self._alternatives(first, call):
                return  # `jnp.where(c, draw_a, draw_b)`: each element keeps one of the two draws
            if self._draw_unused(call, fname, loop_names):
                return  # this draw is never read in its function: nothing drawn twice is used
            self._report(call, f"`{key}` was already consumed by `{_callee(first)}`; split it and use a new key.",
                         key, first)
            return
        in_loop = loop_names is not None and key.split("[")[0] not in loop_names
        # `[permutation(key, a) for a in arrays]`: one permutation applied to each of several arrays
        if (in_loop or (not aligning and root is not None and self._in_comprehension(call, root, key))) \
                and not (fname == "split" and root is not None and _indexed_per_pass(call, root, loop_names, key)):
            self._report(call, f"`{key}` is used on every pass of the loop without being replaced, so every pass "
                         "draws the same numbers; split a new key inside the loop (or `fold_in` the loop index).",
                         key, call)
        state.consumed[key] = call

    def _draw_unused(self, call: cst.CSTNode, fname: Optional[str], loop_names: Optional[Container[str]],
                     overwritten: bool = False) -> bool:
        """Whether nothing reads what `call` drew (with `overwritten`, also: it is overwritten before any
        read). At module level only unread keys count: a module's values may be imported elsewhere."""
        if overwritten and self._result_discarded(call):
            return True
        return (self._fn is not None or fname == "split") \
            and self._result_discarded(call, unread=True, anywhere=loop_names is not None)

    def _example_input(self, call: cst.CSTNode) -> bool:
        """Whether `call` is (in) an example input of a module's `init` (`model.init(key, normal(k, shape))`):
        parameters come from the key and the input's shape and dtype, so its values are never looked at."""
        if self._example_inputs is None:
            self._example_inputs = {id(d) for stmt in self._body for n in descendants(stmt) if isinstance(n, cst.Call)
                                    for a in _example_args(n) for d in descendants(a.value)}
        return id(call) in self._example_inputs

    def _event_list(self) -> list[tuple[str, object]]:
        """Loads and stores of the analysed body in execution order, made on first use."""
        if self._events is None:
            self._events = []
            for stmt in self._body:
                _events(stmt, self._events)
        return self._events

    def _result_discarded(self, call: cst.CSTNode, unread: bool = False, anywhere: bool = False) -> bool:
        """Whether `names = call` (or `names = call * c`) is overwritten before any of its names is read
        (a dead first split, a line pasted twice) — with `unread`, also when none of them is ever read
        again (with `anywhere`, read nowhere in the body): then the key it consumed produced nothing
        that is used."""
        events = self._event_list()
        if ("bare", id(call)) in events:
            # `step_jit(key, state)` run once for its timing, its result dropped: a sampler or a jitted
            # function has no effect besides its result
            return isinstance(call, cst.Call) and self._pure(call)
        try:
            start = events.index(("assigned", id(call)))
        except ValueError:
            return False  # not a plain `names = call` statement
        targets = events[start - 1][1]
        assert isinstance(targets, frozenset)
        pending = set(targets)
        fn = self._fn
        if unread and isinstance(fn, FunctionInfo) and pending & (fn.declared_global | fn.declared_nonlocal):
            return False  # stored for someone else to read
        if anywhere:  # in a loop, a later pass may read what this one stored: no read at all is asked for
            return unread and not any(kind == "load" and name in pending for kind, name in events)
        depth = 0  # inside an `if` entered after the call, stores may not happen: only loads count
        skipping = 0  # the other branch of an `if` whose branch holds the call never follows it
        for kind, name in events[start + 1:]:
            if skipping:
                skipping += {"if": 1, "end": -1}.get(kind, 0)
                continue
            if kind == "if":
                depth += 1
            elif kind == "end":
                depth = max(0, depth - 1)
            elif kind == "else" and depth == 0:
                skipping = 1
            elif kind == "load" and name in pending:
                return False
            elif kind == "store" and depth == 0:
                pending.discard(name)  # type: ignore[arg-type]
                if not pending:
                    return True
        return unread

    def _targets(self, call: cst.CSTNode) -> frozenset:
        """The names `names = call` binds (empty when the call is not such a statement's value)."""
        events = self._event_list()
        try:
            at = events.index(("assigned", id(call)))
        except ValueError:
            return frozenset()
        targets = events[at - 1][1]
        return targets if isinstance(targets, frozenset) else frozenset()

    def _derived(self, names: frozenset) -> frozenset:
        """The names and those bound from them in the body (`expected = recurse(noise)`), a few steps deep."""
        out = set(names)
        assigns = [n for stmt in self._body for n in descendants(stmt) if isinstance(n, cst.Assign)]
        for _ in range(3):
            grew = False
            for n in assigns:
                if any(isinstance(m, cst.Name) and m.value in out for m in descendants(n.value)):
                    for t in n.targets:
                        new = set(names_of(t.target)) - out
                        if new:
                            out |= new
                            grew = True
            if not grew:
                break
        return frozenset(out)

    def _compared(self, first: cst.CSTNode, call: cst.Call) -> bool:
        """Whether the results of both draws meet in one assertion (`assert jnp.allclose(x1, x2)`,
        `assert_allclose(a, b)`, `assert all(abs(a - b) < 1e-6)`): a test drawing the same numbers twice
        on purpose, to compare two ways. A draw is on a side when the side holds the call itself or a
        name bound from it."""
        a, b = self._derived(self._targets(first)), self._derived(self._targets(call))
        if a & b:
            return False

        def on(side: set, ids: set, names: frozenset, node: cst.CSTNode) -> bool:
            return id(node) in ids or bool(side & names)

        for stmt in self._body:
            for n in descendants(stmt):
                if isinstance(n, cst.Assert):
                    pairs = [(c.left, c.comparisons[0].comparator) for c in descendants(n.test)
                             if isinstance(c, cst.Comparison) and len(c.comparisons) == 1]
                elif isinstance(n, cst.Call) and (dotted(n.func) or "").rsplit(".", 1)[-1] in _COMPARISONS:
                    args = [arg.value for arg in n.args if arg.keyword is None][-2:]  # (`self` of unittest first)
                    pairs = [(args[0], args[1])] if len(args) == 2 else []
                else:
                    continue
                for left_node, right_node in pairs:
                    sides = []
                    for side in (left_node, right_node):
                        nodes = list(descendants(side))
                        sides.append(({m.value for m in nodes if isinstance(m, cst.Name)}, {id(m) for m in nodes}))
                    (ln, li), (rn, ri) = sides
                    # each draw on exactly one side: one on each (`allclose(x1, x2)`), or both on one side
                    # against a constant (`allclose(p2 - p1, shift)`); not draws feeding both sides
                    # (`assert_allclose(f(x, w), ref(x, w))`: inputs to two computations, not compared)
                    if on(ln, li, a, first) != on(rn, ri, a, first) and on(ln, li, b, call) != on(rn, ri, b, call):
                        return True
        return False

    def _alternatives(self, first: cst.CSTNode, call: cst.Call) -> bool:
        """Whether the two draws are alternatives one selection keeps one of: the two values of
        `jnp.where(c, a, b)` / `lax.select(c, a, b)`, or `m * a + (1 - m) * b` with a 0/1 mask `m`. Each
        element then comes from one draw only, so nothing is drawn twice."""
        a, b = self._derived(self._targets(first)), self._derived(self._targets(call))
        # (names both draws flow into, `y = jnp.where(c, a, b)` itself, tell the two apart no more)
        a, b = a - b, b - a

        def holds(node: cst.CSTNode, draw: cst.CSTNode, names: frozenset) -> bool:
            return any(n is draw or isinstance(n, cst.Name) and n.value in names for n in descendants(node))

        def split_between(x: cst.CSTNode, y: cst.CSTNode) -> bool:
            return (holds(x, first, a) and holds(y, call, b) and not holds(x, call, b) and not holds(y, first, a)) \
                or (holds(x, call, b) and holds(y, first, a) and not holds(x, first, a) and not holds(y, call, b))

        for stmt in self._body:
            for n in descendants(stmt):
                if isinstance(n, cst.Call) and len(n.args) >= 3 and all(x.keyword is None for x in n.args[:3]) \
                        and (self._where.model.resolve(n.func, self._scope) or "") in _SELECTIONS:
                    cond, x, y = (arg.value for arg in n.args[:3])
                    if split_between(x, y) and not holds(cond, first, a) and not holds(cond, call, b):
                        return True
                elif isinstance(n, cst.BinaryOperation) and isinstance(n.operator, cst.Add):
                    masks = [_mask_factor(side) for side in (n.left, n.right)]
                    if all(m is not None for m in masks) and _complementary(masks[0][0], masks[1][0]) \
                            and split_between(masks[0][1], masks[1][1]):  # type: ignore[index]
                        return True
        return False

    def _pure(self, call: cst.Call) -> bool:
        """A `jax.random` sampler, a distribution's sampling method (`dist.sample(key, shape)`), or a name
        bound only to a jitted function (`f = jax.jit(g)`)."""
        if self._random_fn(call) is not None or _sampled_key(call) is not None:
            return True
        if not isinstance(call.func, cst.Name):
            return False
        model = self._where.model
        owner = model.owner_of(call.func.value, self._scope)
        values = owner.assigned.get(call.func.value, []) if owner is not None else []
        if len(values) != 1 or not isinstance(values[0], cst.Call) or owner is None:
            return False
        got = model.transform_of(values[0].func, owner)
        return got is not None and got[0].cached

    def _report(self, node: cst.CSTNode, text: str, key: str, first: cst.CSTNode) -> None:
        fn = self._scope.function_scope()
        subject = {"key": key, "loop": first is node}  # `loop`: the same call reuses it on each pass
        self.reports.append(Report(node, f"PRNG key reuse: {text}", fn, subject=subject,
                                   subject_nodes={"first_line": first, "line": node}))

    def _expr(self, node: cst.CSTNode, state: _State, loop_names: Optional[Container[str]],
              root: Optional[cst.CSTNode] = None) -> None:
        if not state.keys:
            return  # (nothing holds a key yet: no call here can consume one, nor hand one on)
        root = node if root is None else root
        for part in self._calls_in(node, arms=True):
            if isinstance(part, cst.IfExp):
                # `herm(key) if hermitian else normal(key)`: one arm runs, so the arms do not collide
                self._expr(part.test, state, loop_names, root)
                merged = _State(set(), {}, {})
                for arm in (part.body, part.orelse):
                    inner = state.copy()
                    self._expr(arm, inner, loop_names, root)
                    merged.merge(inner)
                state.keys, state.consumed, state.folded = merged.keys, merged.consumed, merged.folded
            else:
                self._consume(part, state, loop_names, root)

    def _has_comprehension(self, root: cst.CSTNode) -> bool:
        found = self._comprehension_roots.get(id(root))
        if found is None:
            found = self._comprehension_roots[id(root)] = any(isinstance(n, _COMPREHENSIONS) for n in descendants(root))
        return found

    def _in_comprehension(self, call: cst.Call, root: cst.CSTNode, key: str = "") -> bool:
        """Whether the call runs once per element of a comprehension (not in its first iterable) with a
        `key` the comprehension does not bind anew on each pass (`normal(k) for k in keys` is fine)."""
        return self._comprehension_use(call, root, key)[0] == "reused"

    def _comprehension_use(self, call: cst.Call, root: cst.CSTNode, key: str) -> tuple[Optional[str], Optional[str]]:
        """("reused", None) when the call runs once per element of a comprehension with a `key` it does
        not bind; ("own", keys) when a comprehension around the call binds `key` itself — a new key on
        each pass, whatever an outer variable of that name holds — with `keys`, the collection it takes
        them from when that is a name (`for rng, n in zip(rngs, sizes)`); else (None, None)."""
        found: Optional[str] = None
        source: Optional[str] = None
        base = key.split("[")[0]

        def walk(n: cst.CSTNode, inside: bool) -> None:
            nonlocal found, source
            if found or isinstance(n, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                return
            if n is call:
                found = "reused" if inside else None
                return
            if isinstance(n, (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp)):
                walk(n.for_in.iter, inside)  # evaluated once
                level: Optional[cst.CompFor] = n.for_in
                while level is not None:
                    if base in set(_target_names(level.target)):
                        if found is None and contains(n, call) and not contains(n.for_in.iter, call):
                            found = "own"  # the key is the comprehension's own variable
                            source = _iterated_source(level, base)
                        return
                    level = level.inner_for_in
                for child in iter_children(n):
                    if child is not n.for_in:
                        walk(child, True)
                for child in iter_children(n.for_in):
                    if child is not n.for_in.iter:
                        walk(child, True)
                return
            for child in iter_children(n):
                walk(child, inside)

        walk(root, False)
        return found, source

    def _bind(self, target: cst.BaseExpression, value: Optional[cst.BaseExpression], state: _State) -> None:
        names = names_of(target)
        is_key = value is not None and self._is_key_source(value)
        if is_key:
            self._sourced.update(names)
        for n in names:
            for k in list(state.consumed):
                if k == n or k.startswith(n + "["):
                    del state.consumed[k]
            for k in list(state.handed):
                if k == n or k.startswith(n + "["):
                    del state.handed[k]
            # a rebound guard name (`kind = ...`) no longer keeps the guarded bodies apart
            state.exclusive = {k: g for k, g in state.exclusive.items() if g[0].split(".")[0] != n and k != n}
            for k in list(state.folded):
                if k == n or k.startswith(n + "["):
                    del state.folded[k]
                else:  # data naming a rebound variable is new data
                    state.folded[k] = {d: c for d, c in state.folded[k].items() if not re.search(rf"\b{n}\b", d)}
            if is_key or _KEY_NAME.search(n):
                state.keys.add(n)  # a fresh key (or, by its name, most likely one)
            else:
                state.keys.discard(n)

    def _block(self, stmts: list[cst.CSTNode], state: _State, loop_names: Optional[Container[str]]) -> tuple[_State, bool]:
        for stmt in stmts:
            self._state_keys = state.keys
            if type(stmt) is cst.SimpleStatementLine:
                for small in stmt.body:  # type: ignore[attr-defined]
                    tp = type(small)  # (exact type tests: a failed `isinstance` on libcst's nodes is slow)
                    if tp is cst.Assign:
                        self._expr(small.value, state, loop_names)
                        for t in small.targets:
                            self._state_keys = state.keys
                            self._bind(t.target, small.value, state)
                    elif tp is cst.AnnAssign and small.value is not None:
                        self._expr(small.value, state, loop_names)
                        self._bind(small.target, small.value, state)
                    elif tp is cst.AugAssign:
                        self._expr(small.value, state, loop_names)
                        self._bind(small.target, None, state)
                    else:
                        self._expr(small, state, loop_names)
                    if tp in _EXIT_TYPES:
                        return state, True
            elif isinstance(stmt, cst.If):
                self._expr(stmt.test, state, loop_names)
                # `uniform = True` above `if uniform:` in a function: only one arm ever runs (a script's
                # module-level `train = False` is a switch its user flips: both arms count)
                fixed = self._where.model.fixed_truth(stmt.test, self._scope, constants=False)
                if fixed is not None:
                    arm = _body(stmt.body) if fixed else [] if stmt.orelse is None else \
                        [stmt.orelse] if isinstance(stmt.orelse, cst.If) else _body(stmt.orelse.body)
                    state, ex = self._block(arm, state, loop_names)
                    if ex:
                        return state, True
                    continue
                guard = _equality_guard(stmt.test)
                then_in = state.copy()
                if guard is not None:
                    # `if kind == "gaussian":` after `if kind == "uniform":` — that earlier body did not run
                    for k, g in list(then_in.exclusive.items()):
                        if _exclusive(g, guard):
                            then_in.consumed.pop(k, None)
                            del then_in.exclusive[k]
                # `if t == 0:` in `for t in range(n)`: that arm runs on one pass only
                once = isinstance(loop_names, _LoopNames) and _one_pass_test(stmt.test, loop_names.loop)
                then_state, then_exit = self._block(_body(stmt.body), then_in, None if once else loop_names)
                if stmt.orelse is None:
                    else_state, else_exit = state, False
                elif isinstance(stmt.orelse, cst.If):
                    else_state, else_exit = self._block([stmt.orelse], state.copy(), loop_names)
                else:
                    else_state, else_exit = self._block(_body(stmt.orelse.body), state.copy(), loop_names)
                if then_exit and else_exit:
                    return state, True
                merged = _State(set(), {}, {})
                for st, ex in ((then_state, then_exit), (else_state, else_exit)):
                    if not ex:
                        merged.merge(st)
                exclusive = {k: g for k, g in state.exclusive.items() if k in merged.consumed}
                if guard is not None and stmt.orelse is None and not then_exit \
                        and guard[0].split(".")[0] not in {n for t in descendants(stmt.body)
                                                           if isinstance(t, (cst.AssignTarget, cst.AugAssign))
                                                           for n in names_of(t.target)}:
                    exclusive.update((k, guard) for k in then_state.consumed if k not in state.consumed)
                state.keys, state.consumed, state.exclusive = merged.keys, merged.consumed, exclusive
            elif isinstance(stmt, (cst.For, cst.While)):
                if isinstance(stmt, cst.For):
                    self._expr(stmt.iter, state, loop_names)
                else:
                    self._expr(stmt.test, state, loop_names)
                bound = _LoopNames(stmt)
                inner = state.copy()
                if isinstance(stmt, cst.For):
                    self._bind(stmt.target, None, inner)
                after, _ = self._block(_body(stmt.body), inner, bound)
                state.merge(after)
                if stmt.orelse is not None:
                    self._block(_body(stmt.orelse.body), state, loop_names)
            elif isinstance(stmt, (cst.With, cst.Try, cst.TryStar)):
                if isinstance(stmt, cst.With):
                    for item in stmt.items:
                        self._expr(item.item, state, loop_names)
                # a handler runs instead of what is left of the body, whose draws it replaces (`try: noise =
                # chol @ normal(key, ...)` / `except: noise = multivariate_normal(key, ...)`): it starts from
                # the keys as they were before the body
                before = state.copy() if isinstance(stmt, (cst.Try, cst.TryStar)) and stmt.handlers else state
                state, ex = self._block(_body(stmt.body), state, loop_names)
                if ex:
                    return state, True
                if isinstance(stmt, (cst.Try, cst.TryStar)):
                    for h in stmt.handlers:
                        self._block(_body(h.body), before.copy(), loop_names)
                    if stmt.finalbody is not None:
                        self._block(_body(stmt.finalbody.body), state, loop_names)
            elif isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
                for name in names_of(stmt.name):
                    state.keys.discard(name)
        return state, False


def _flowing_calls(value: cst.BaseExpression) -> list[cst.Call]:
    """The calls whose result reaches only the assigned names: the value itself, operands of its
    arithmetic (`normal(key, shape) * scale`), or what is indexed (`split(key, 3)[0]`)."""
    if isinstance(value, cst.Call):
        return [value]
    if isinstance(value, cst.BinaryOperation):
        return _flowing_calls(value.left) + _flowing_calls(value.right)
    if isinstance(value, cst.UnaryOperation):
        return _flowing_calls(value.expression)
    if isinstance(value, cst.Subscript):  # `key = split(key, 1)[0]`: the rest of the result is dropped
        return _flowing_calls(value.value)
    return []


def _events(node: cst.CSTNode, out: list[tuple[str, object]]) -> None:
    """Loads and stores of names in execution order (a value before its targets); a plain
    `names = call(...)` (or `call(...) * c`) is marked ("targets", names), ("assigned", id of the call)
    after its stores."""
    if isinstance(node, cst.Assign) or isinstance(node, cst.AnnAssign) and node.value is not None:
        value = node.value
        assert value is not None
        _events(value, out)
        names: list[str] = []
        for target in ([t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]):
            _target_events(target, out)
            names += names_of(target)
        if names:
            for call in _flowing_calls(value):
                out.append(("targets", frozenset(names)))
                out.append(("assigned", id(call)))
        return
    if isinstance(node, cst.Expr) and isinstance(node.value, cst.Call):
        _events(node.value, out)
        out.append(("bare", id(node.value)))  # a call whose result is thrown away
        return
    if isinstance(node, (cst.AnnAssign, cst.AugAssign)):
        if node.value is not None:
            _events(node.value, out)
        if isinstance(node, cst.AugAssign):
            out.extend(("load", n) for n in names_of(node.target))
        _target_events(node.target, out)
        return
    if isinstance(node, cst.For):
        _events(node.iter, out)
        _target_events(node.target, out)
        _events(node.body, out)
        if node.orelse is not None:
            _events(node.orelse, out)
        return
    if isinstance(node, (cst.Try, cst.TryStar)):
        _events(node.body, out)
        for handler in node.handlers:  # a handler may not run: its stores are conditional, like an `if` arm's
            out.append(("if", None))
            _events(handler.body, out)
            out.append(("end", None))
        for rest in (node.orelse, node.finalbody):
            if rest is not None:
                _events(rest.body, out)
        return
    if isinstance(node, cst.If):
        _events(node.test, out)
        out.append(("if", None))
        _events(node.body, out)
        out.append(("else", None))
        if node.orelse is not None:
            _events(node.orelse, out)
        out.append(("end", None))
        return
    if isinstance(node, cst.Name):
        out.append(("load", node.value))
        return
    if isinstance(node, cst.Attribute):  # `jax.random.key`: `key` is an attribute name, not a read of `key`
        if isinstance(node.value, cst.Name) and node.attr.value in _META_ATTRS:
            out.append(("meta", node.value.value))  # `x.shape`: the values drawn are not looked at
            return
        _events(node.value, out)
        return
    examples = _example_args(node) if isinstance(node, cst.Call) else []
    if examples:
        # `model.init(key, x)`: the values of `x` are never looked at, only its shape and dtype
        for child in iter_children(node):
            if any(child is a for a in examples) and isinstance(child.value, cst.Name) and not child.star:  # type: ignore[attr-defined]
                out.append(("meta", child.value.value))
            else:
                _events(child, out)
        return
    for child in iter_children(node):
        _events(child, out)


def _example_args(call: cst.Call) -> list[cst.Arg]:
    """The example inputs of a module's `init` (`model.init(key, x, train=False)`: all but the first argument
    and `rngs=`): Flax's and Haiku's `init` make parameters from the key and the inputs' shapes and dtypes,
    never from their values."""
    if not (isinstance(call.func, cst.Attribute) and call.func.attr.value == "init") or len(call.args) < 2:
        return []
    return [a for a in call.args[1:] if a.keyword is None or a.keyword.value != "rngs"]


def _target_events(target: cst.BaseExpression, out: list[tuple[str, object]]) -> None:
    if isinstance(target, (cst.Name, cst.Tuple, cst.List, cst.StarredElement)):
        out.extend(("store", n) for n in names_of(target))
    else:  # `x[i] = v`, `obj.a = v`: reads the container
        _events(target, out)


def _body(block: cst.BaseSuite) -> list[cst.CSTNode]:
    return list(block.body) if isinstance(block, cst.IndentedBlock) else list(block.body)  # type: ignore[attr-defined]


def _one_pass_test(test: cst.BaseExpression, loop: Union[cst.For, cst.While]) -> bool:
    """`t == 0` (or `0 == t`) where `loop` is `for t in range(...)` (or `for t, x in enumerate(...)`): the
    loop's index takes each value once, so the test holds on one pass at most."""
    if not isinstance(loop, cst.For) or not isinstance(loop.iter, cst.Call) or not isinstance(test, cst.Comparison) \
            or len(test.comparisons) != 1 or not isinstance(test.comparisons[0].operator, cst.Equal):
        return False
    kind = dotted(loop.iter.func)
    if kind == "range":
        index = loop.target
    elif kind == "enumerate" and isinstance(loop.target, (cst.Tuple, cst.List)) and loop.target.elements:
        index = loop.target.elements[0].value
    else:
        return False
    left, right = test.left, test.comparisons[0].comparator
    return isinstance(index, cst.Name) and any(
        isinstance(a, cst.Name) and a.value == index.value and isinstance(b, cst.Integer)
        for a, b in ((left, right), (right, left)))


class _LoopNames:
    """The names a loop (re)binds, found on first use: most loops never consume a key."""

    __slots__ = ("loop", "names")

    def __init__(self, loop: Union[cst.For, cst.While]) -> None:
        self.loop = loop
        self.names: Optional[Container[str]] = None

    def __contains__(self, name: object) -> bool:
        if self.names is None:
            self.names = _bound_in(self.loop)
        return name in self.names


def _bound_in(loop: Union[cst.For, cst.While]) -> set[str]:
    """Names (re)bound anywhere in a loop, including its target."""
    out: set[str] = set(names_of(loop.target)) if isinstance(loop, cst.For) else set()
    stack: list[cst.CSTNode] = [loop.body]
    while stack:
        n = stack.pop()
        if isinstance(n, cst.AssignTarget):
            out.update(names_of(n.target))
        elif isinstance(n, (cst.AugAssign, cst.AnnAssign)):
            out.update(names_of(n.target))
        elif isinstance(n, cst.For):
            out.update(names_of(n.target))
        if not isinstance(n, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            stack.extend(iter_children(n))
    return out


def _callee(call: cst.CSTNode) -> str:
    if isinstance(call, cst.Call):
        name = dotted(call.func)
        if name:
            return name
        if isinstance(call.func, cst.Attribute):  # `Normal(0, 1).sample(key)`
            return "." + call.func.attr.value
    return "an earlier call"


# Methods of distributions (distrax, TensorFlow Probability on JAX, numpyro) that draw from the key they
# are given as `seed=`/`key=` or first argument.
_SAMPLE_METHODS = frozenset({"sample", "sample_and_log_prob", "sample_n", "rsample"})


_META_ATTRS = frozenset({"shape", "dtype", "ndim", "size"})
# Calls that compare their arguments (tests asserting two draws agree).
# Selections keeping one of two values per element.
_SELECTIONS = frozenset({"jax.numpy.where", "numpy.where", "jax.lax.select"})


def _mask_factor(side: cst.BaseExpression) -> Optional[tuple[str, cst.BaseExpression]]:
    """`m * value` (either order) as (the code of the mask, the value), with `(1 - m)` as a mask too."""
    if not isinstance(side, cst.BinaryOperation) or not isinstance(side.operator, cst.Multiply):
        return None
    for mask, value in ((side.left, side.right), (side.right, side.left)):
        if isinstance(mask, (cst.Name, cst.Attribute, cst.Subscript)) or (
                isinstance(mask, cst.BinaryOperation) and isinstance(mask.operator, cst.Subtract)
                and isinstance(mask.left, cst.Integer) and mask.left.value == "1"):
            return code_of(mask), value
    return None


def _complementary(m1: str, m2: str) -> bool:
    """`team` and `(1 - team)`."""
    strip = lambda c: c.strip().removeprefix("(").removesuffix(")").replace(" ", "")  # noqa: E731
    return strip(m2) == f"1-{strip(m1)}" or strip(m1) == f"1-{strip(m2)}"


_COMPARISONS = ("allclose", "assert_allclose", "array_equal", "assert_array_equal", "assert_array_almost_equal",
                "isclose", "assertEqual", "assertAllClose", "assert_trees_all_close", "assert_trees_all_equal")


def _equality_guard(test: cst.BaseExpression) -> Optional[tuple[str, str, bool]]:
    """`kind == "literal"` / `cfg.mode != 2` (or the first such term of an `and`): the name or dotted
    attribute tested, the literal's code, and whether the test is `==`."""
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
        return _equality_guard(test.left) or _equality_guard(test.right)
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        subject = dotted(test.left) if isinstance(test.left, (cst.Name, cst.Attribute)) else None
        comp = test.comparisons[0]
        if subject is not None and isinstance(comp.operator, (cst.Equal, cst.NotEqual)) \
                and isinstance(comp.comparator, (cst.SimpleString, cst.Integer)):
            return subject, code_of(comp.comparator), isinstance(comp.operator, cst.Equal)
    return None


def _exclusive(a: tuple[str, str, bool], b: tuple[str, str, bool]) -> bool:
    """Whether two guards cannot both hold: `x == 1` and `x == 2`, or `x == 1` and `x != 1`."""
    if a[0] != b[0]:
        return False
    return (a[2] and b[2] and a[1] != b[1]) or (a[2] != b[2] and a[1] == b[1])


def _hands_a_key(call: cst.Call, keys: set[str]) -> bool:
    """Whether an argument of the call is a name holding a key, or a constant subscript of one."""
    return any((ref := key_ref(a.value)) is not None and _held(ref, keys) for a in call.args)


def _held(ref: str, keys: set[str]) -> bool:
    """Whether `key` or `keys[0]` (a `key_ref`) names a key: the name, or the collection subscripted."""
    return ref in keys or ref.split("[")[0] in keys


def _sampled_key(call: cst.Call) -> Optional[str]:
    """The key a distribution's sampling method is given (`dist.sample(seed=rngs[1])`, `d.sample(key, (3,))`)."""
    if not isinstance(call.func, cst.Attribute) or call.func.attr.value not in _SAMPLE_METHODS:
        return None
    for a in call.args:
        if a.keyword is not None and a.keyword.value in ("seed", "key", "rng", "rng_key"):
            return key_ref(a.value)
    first = call.args[0] if call.args else None
    return key_ref(first.value) if first is not None and first.keyword is None and not first.star else None


# Samplers whose repeated draws with one key give the same reordering of equally long arrays.
_ALIGNING = frozenset({"permutation", "shuffle"})

_COMPREHENSIONS = (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp)


def _iterated_source(level: cst.CompFor, name: str) -> Optional[str]:
    """The name of the collection a comprehension's `name` is drawn from: `for k in keys`, or the
    matching argument of `zip(...)` in `for k, n in zip(keys, sizes)`."""
    it, target = level.iter, level.target
    if isinstance(target, cst.Name):
        return it.value if isinstance(it, cst.Name) and target.value == name else None
    if isinstance(target, (cst.Tuple, cst.List)) and isinstance(it, cst.Call) and dotted(it.func) == "zip":
        names = [el.value.value if isinstance(el.value, cst.Name) else None for el in target.elements]
        if name in names and len(it.args) == len(names):
            arg = it.args[names.index(name)].value
            return arg.value if isinstance(arg, cst.Name) else None
    return None


def _folds_past_split(split: cst.CSTNode, fold: cst.Call) -> bool:
    """`fold_in(key, n)` after `split(key, n)` (the same count, or literal counts with i >= n): the folded
    key is `split(key, n + 1)[n]`, none of the split's keys."""
    if not isinstance(split, cst.Call) or len(fold.args) < 2:
        return False
    count = _arg(split, 1, "num") or cst.Integer("2")
    data = _arg(fold, 1, "data")
    if data is None:
        return False
    if isinstance(count, cst.Integer) and isinstance(data, cst.Integer):
        return int(data.evaluated_value) >= int(count.evaluated_value)
    return code_of(count) == code_of(data)


def _indexed_per_pass(call: cst.Call, root: cst.CSTNode, loop_names: Optional[Container[str]], key: str) -> bool:
    """`split(key, n)[i]` where `i` is a variable of the loop or comprehension around it: each pass takes
    a different key of the same split (`fold_in(key, i)` written another way), when the statement (or
    comprehension) uses `key` nowhere else (`keys[1] if i == 0 else split(keys[1])[i]` uses it whole)."""
    found: list[tuple[set[str], set[str]]] = []
    around: list[cst.CSTNode] = []

    def walk(n: cst.CSTNode, bound: frozenset[str]) -> None:
        if found:
            return
        if isinstance(n, (cst.SimpleStatementLine, cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp)):
            around.append(n)
        if isinstance(n, cst.Subscript) and n.value is call:
            index = {d.value for el in n.slice for d in descendants(el) if isinstance(d, cst.Name)}
            found.append((index, set(bound)))
            return
        if isinstance(n, (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp)):
            level: Optional[cst.CompFor] = n.for_in
            names = set(bound)
            while level is not None:
                names.update(_target_names(level.target))
                level = level.inner_for_in
            bound = frozenset(names)
        for c in children(n):
            walk(c, bound)
        if not found and around and around[-1] is n:
            around.pop()

    walk(root, frozenset())
    if not found:
        return False
    region = around[-1] if around else root  # (the statement's expression, when that is what is walked)
    if sum(1 for d in descendants(region) if isinstance(d, (cst.Name, cst.Subscript, cst.Attribute))
           and code_of(d) == key) != 1:
        return False
    index, bound = found[0]
    return any(i in bound or (loop_names is not None and i in loop_names) for i in index)
