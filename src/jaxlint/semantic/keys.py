"""Which functions consume a PRNG key they are given: sample from it or split it, here or in a helper."""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Callable, Container, Iterable, Optional

import libcst as cst

from ..jaxapi import KEY_MAKERS
from ..syntax import _arg, _int_leaf, _target_names, descendants, dotted
from .scopes import FunctionInfo, Scope

if TYPE_CHECKING:
    from .model import ModuleModel

# A consumed parameter as another file sees it: (name, positional index or None when keyword-only).
ConsumedParam = tuple[str, Optional[int]]
# Packages whose functions are never the project's own (their keys are handled by name, or not at all).
_LIBRARIES = frozenset({"jax", "numpy", "builtins", "flax", "optax", "equinox", "haiku", "chex", "distrax",
                        "numpyro", "tensorflow_probability", "functools", "math", "random", "np", "jnp"})


def names_of(target: cst.BaseExpression) -> list[str]:
    """The names an assignment target binds, in order."""
    return list(_target_names(target))


def key_ref(expr: cst.BaseExpression) -> Optional[str]:
    """`key` or `keys[0]` (a constant subscript) as a trackable name."""
    if isinstance(expr, cst.Name):
        return expr.value
    if isinstance(expr, cst.Subscript) and isinstance(expr.value, cst.Name) and len(expr.slice) == 1:
        sl = expr.slice[0].slice
        if isinstance(sl, cst.Index) and isinstance(sl.value, cst.Integer):
            return f"{expr.value.value}[{sl.value.value}]"
    return None


def key_arg(call: cst.Call) -> Optional[str]:
    """The key a `jax.random` function is given: its first positional argument or `key=`."""
    for a in call.args:
        if a.keyword is not None:
            if a.keyword.value == "key":
                return key_ref(a.value)
            continue
        return key_ref(a.value) if not a.star else None
    return None


def draws_nothing(call: cst.Call, fname: str) -> bool:
    """A `jax.random.<fname>` call whose result does not depend on the key: `randint(key, shape, 0, 1)`, whose
    literal bounds leave one value (the upper bound is exclusive)."""
    if fname != "randint":
        return False
    low, high = _arg(call, 2, "minval"), _arg(call, 3, "maxval")
    if low is None or high is None:
        return False
    low_value, high_value = _int_leaf(low), _int_leaf(high)
    return low_value is not None and high_value is not None and high_value - low_value <= 1


def draws_unused(call: cst.Call, fn: FunctionInfo) -> bool:
    """`k1, k2 = split(key)` in a helper that never reads `k1` or `k2`: the key gave nothing that is used."""
    targets = [t for t, v, how in fn.events if v is call and how == "="]
    if len(targets) != 1 or not isinstance(fn.node, cst.FunctionDef):
        return False
    names = set(names_of(targets[0]))
    stored = {id(n) for n in descendants(targets[0]) if isinstance(n, cst.Name)}
    return bool(names) and not any(isinstance(n, cst.Name) and n.value in names and id(n) not in stored
                                   for n in descendants(fn.node))


def handed(call: cst.Call, params: list[ConsumedParam], offset: int, refs: bool = False) -> list[tuple[str, str]]:
    """The names a call hands to a function's parameters, as (parameter, name): positional arguments
    after the `offset` already bound, and keywords (`rng=key`). With `refs`, also constant subscripts
    (`keys[0]`) in their `key_ref` spelling. `params`: the function's parameters with their positions."""
    out: list[tuple[str, str]] = []
    for param, value in handed_values(call, params, offset):
        ref = None if value is None else key_ref(value) if refs else (value.value if isinstance(value, cst.Name) else None)
        if ref is not None:
            out.append((param, ref))
    return out


def signature(fn: FunctionInfo) -> list[ConsumedParam]:
    """A function's named parameters with their positions (None for keyword-only ones)."""
    return [(p.name, p.index) for p in fn.params if not p.star]


def _library(qual: str) -> bool:
    return qual.lstrip(".").split(".")[0] in _LIBRARIES


def _consumed_elsewhere(call: cst.Call, model: "ModuleModel", scope: "Scope") -> list[ConsumedParam]:
    """The parameters a function of another project file consumes, from the project's summaries (none
    without them, or when the call runs no such function)."""
    qual = model.resolve(call.func, scope)
    if not _project_function(qual):
        return []
    return list(model.ask("key_params", qual, absent=None) or ())


def _project_function(qual: Optional[str]) -> bool:
    """Whether a resolved callee may be a function of another project file, which the project's summaries
    tell about (it is no library's)."""
    return bool(qual) and not _library(qual)  # type: ignore[arg-type]


# Per function of a module: the key parameters it samples from or splits itself; the calls that hand a
# parameter on to another function of the module (callee id, (callee's parameter, the name handed));
# the calls that hand one to a function of another project file (its qualified name, the call, the
# call's guards), answered only when asked (see `KeyTable`).
Elsewhere = tuple[str, cst.Call, tuple[str, ...]]
KeyPlan = tuple[set[str], list[tuple[int, list[tuple[str, str]]]], list[Elsewhere]]


def _key_plans(model: "ModuleModel") -> tuple[dict[int, KeyPlan], dict[tuple[int, str], frozenset[str]]]:
    """Each function's `KeyPlan` (functions that hand nothing on and draw from nothing are left out), and
    the conditions noted so far: (function id, parameter) -> the flags the function draws from it under."""
    plans: dict[int, KeyPlan] = {}
    conditions: dict[tuple[int, str], frozenset[str]] = {}
    for fn in model.functions:
        params = _params(fn)
        if not params:
            continue
        direct: set[str] = set()
        via: list[tuple[int, list[tuple[str, str]]]] = []
        elsewhere: list[Elsewhere] = []
        switches, optional = _flags(fn)

        def note(name: str, call: cst.Call) -> None:
            _note(conditions, fn, name, model.call_guards.get(id(call), ()), switches, optional)

        for call in fn.calls:
            q = model.resolve(call.func, fn) or ""
            fname = q[len("jax.random."):] if q.startswith("jax.random.") else None
            if fname is not None and fname not in KEY_MAKERS and fname != "fold_in" and "." not in fname:
                name = key_arg(call)
                if name in params and not draws_unused(call, fn) and not draws_nothing(call, fname):
                    direct.add(name)  # type: ignore[arg-type]
                    note(name, call)  # type: ignore[arg-type]
                continue
            if not any(isinstance(a.value, cst.Name) and a.value.value in params for a in call.args):
                continue
            ref = model.callee(call, fn)
            if ref is None:  # `utils.sample_noise(key, shape)` of another project file
                if _project_function(q):
                    elsewhere.append((q, call, tuple(model.call_guards.get(id(call), ()))))
                continue
            hands = [(param, name) for param, name in handed(call, signature(ref.fn), ref.offset) if name in params]
            if hands:
                via.append((id(ref.fn), hands))
                for _param, name in hands:
                    note(name, call)
        if direct or via or elsewhere:
            plans[id(fn)] = (direct, via, elsewhere)
    return plans, conditions


def _flags(fn: FunctionInfo) -> tuple[set[str], set[str]]:
    """A function's flag parameters off by default (`shuffle=False`), which must be true for a key to be
    drawn from, and its parameters that default to None, drawn from only in a branch of `if x is None:`
    (the key feeds a sampler only when the caller left `x` out: `if x_prop is None: x_prop = sample(key, ...)`)."""
    switches = {p.name for p in fn.params if p.has_default and _falsy(p.default) and p.name not in fn.assigned}
    optional = {p.name for p in fn.params if p.has_default and isinstance(p.default, cst.Name)
                and p.default.value == "None"}
    return switches, optional


def _note(conditions: dict[tuple[int, str], frozenset[str]], fn: FunctionInfo, name: str, guards: Iterable[str],
          switches: set[str], optional: set[str]) -> None:
    """Record under which flags a call of `fn`'s body consumes its parameter `name`: the flags all such
    calls need (none, once one call draws unconditionally)."""
    guards = tuple(guards)
    needed = frozenset([g[5:] for g in guards if g[5:] in switches and g.startswith("true:")]
                       + [g for g in guards if g.startswith("none:") and g[5:] in optional])
    key = (id(fn), name)
    conditions[key] = conditions[key] & needed if key in conditions else needed


def _resolve_elsewhere(elsewhere: list[Elsewhere], params: set[str],
                       key_params: Callable[[str], Optional[tuple[ConsumedParam, ...]]],
                       note: Optional[Callable[[str, tuple[str, ...]], None]] = None) -> set[str]:
    """The parameters among `params` that a function's calls into other project files consume, from the
    project's summaries (`key_params`; each noted with the call's guards, when `note` is given)."""
    found: set[str] = set()
    for qual, call, guards in elsewhere:
        for _param, name in handed(call, list(key_params(qual) or ()), 0):
            if name in params:
                found.add(name)
                if note is not None:
                    note(name, guards)
    return found


def _params(fn: FunctionInfo) -> set[str]:
    """The parameters whose key a function may consume: a parameter rebound in the body (`rng =
    fold_in(rng, step)`) is not what gets consumed."""
    return {p.name for p in fn.params if not p.star and p.name not in fn.assigned}


def _solve(plans: dict[int, KeyPlan], direct: dict[int, set[str]]) -> dict[int, set[str]]:
    """The consumed parameters of the planned functions, through the helpers that hand a key on, to a
    fixed point (`direct`: what each consumes itself or through other files)."""
    out: dict[int, set[str]] = {}
    grew = True
    while grew:
        grew = False
        for fid, (_d, via, _e) in plans.items():
            found = set(direct.get(fid, ()))
            for callee_id, hands in via:
                consumed = out.get(callee_id)
                if consumed:
                    found.update(name for param, name in hands if param in consumed)
            if found - out.get(fid, set()):
                out.setdefault(fid, set()).update(found)
                grew = True
    return out


def key_consumers(model: "ModuleModel") -> dict[int, set[str]]:
    """Functions of this module that consume a key parameter (sample from it or split it, directly,
    through another such function of the module, or through one of another project file): id of the
    function -> names of those parameters."""
    cached = model.__dict__.get("_key_consumers")
    if cached is not None:
        return cached
    plans, conditions = _key_plans(model)
    direct: dict[int, set[str]] = {}
    for fn in model.functions:
        plan = plans.get(id(fn))
        if plan is None:
            continue
        direct[id(fn)] = set(plan[0])
        if plan[2]:
            switches, optional = _flags(fn)
            note = functools.partial(_note, conditions, fn, switches=switches, optional=optional)
            asked = functools.partial(model.ask, "key_params", absent=None)
            direct[id(fn)] |= _resolve_elsewhere(plan[2], _params(fn), asked, note)
    model.__dict__["_key_conditions"] = {k: v for k, v in conditions.items() if v}
    out = _solve(plans, direct)
    model.__dict__["_key_consumers"] = out
    return out


class KeyTable:
    """What another file of the project needs to know of a module: the parameters each module-level function
    consumes as a key, with their positions. Answered one function at a time: only the functions the one
    asked about hands its parameters to (here or in other files, through the project's summaries) are
    followed, not every function of the module (whose answers would model much of the project). Keeps the
    plans and each planned function's parameters, not the module's model."""

    def __init__(self, model: "ModuleModel", fault: Callable[[Exception], None] = lambda exc: None) -> None:
        self._fault = fault  # told of a question the plans cannot answer (which is then answered: none)
        self._plans, _conditions = _key_plans(model)
        self._params = {id(fn): _params(fn) for fn in model.functions if id(fn) in self._plans}
        self._defs = {name: (id(fn), signature(fn)) for name, fn in model.root.defs.items() if id(fn) in self._plans}
        project = model.project_classes()  # (None: the module imports nothing of the project)
        self._key_params = project.key_params if project is not None else lambda qual: None
        self._answers: dict[str, tuple[ConsumedParam, ...]] = {}

    def get(self, name: str) -> Optional[tuple[ConsumedParam, ...]]:
        """The consumed parameters (with their positions) of the module-level function `name`, or None."""
        if name not in self._answers:
            self._answers[name] = ()  # (asked again while it is answered, through a cycle: none yet)
            try:
                self._answers[name] = self._consumed(name)
            except Exception as exc:  # noqa: BLE001 - as a module the model cannot summarise tells nothing
                self._fault(exc)
        return self._answers[name] or None

    def _consumed(self, name: str) -> tuple[ConsumedParam, ...]:
        if name not in self._defs:
            return ()
        fid, sig = self._defs[name]
        reach, todo = {fid}, [fid]
        while todo:  # the module's functions it hands a parameter on to, and theirs
            for callee_id, _hands in self._plans[todo.pop()][1]:
                if callee_id in self._plans and callee_id not in reach:
                    reach.add(callee_id)
                    todo.append(callee_id)
        plans = {f: self._plans[f] for f in reach}
        direct = {f: plan[0] | (_resolve_elsewhere(plan[2], self._params[f], self._key_params) if plan[2] else set())
                  for f, plan in plans.items()}
        consumed = _solve(plans, direct).get(fid)
        return tuple((p, i) for p, i in sig if p in consumed) if consumed else ()


def consumed_when(call: cst.Call, fn: FunctionInfo, offset: int, param: str, model: "ModuleModel") -> bool:
    """Whether a call of `fn` (a key consumer of this module) can draw from the key it gives `param`:
    not when `fn` draws from it only under a flag off by default (`if shuffle:`) that the call leaves
    out or passes as a false literal (`data_loader(rng, data, bs)` for evaluation), nor when it draws
    only under `if x is None:` and the call gives `x`."""
    key_consumers(model)
    needed = model.__dict__.get("_key_conditions", {}).get((id(fn), param))
    if not needed:
        return True
    given = dict(handed_values(call, signature(fn), offset))
    for flag in needed:
        if flag.startswith("none:"):  # drawn from only when the call leaves the parameter None
            value = given.get(flag[5:])
            if flag[5:] in given and value is not None and not (isinstance(value, cst.Name) and value.value == "None"):
                return False
        elif flag not in given or (given[flag] is not None and _falsy(given[flag])):
            return False
    return True


def handed_values(call: cst.Call, params: list[ConsumedParam], offset: int
                  ) -> list[tuple[str, Optional[cst.BaseExpression]]]:
    """(parameter, value) for each argument a call gives a named parameter: positional arguments after the
    `offset` already bound, and keywords. A parameter a `*args` or `**options` may fill comes with None."""
    out: list[tuple[str, Optional[cst.BaseExpression]]] = []
    by_position = {index: name for name, index in params if index is not None}
    named = {name for name, _index in params}
    position = offset
    for a in call.args:
        if a.star == "**":
            out += [(name, None) for name in sorted(named)]
        elif a.star:
            position = -1  # `*args`: the positions from here on are unknown
            out += [(name, None) for name, index in params if index is not None]
        elif a.keyword is not None:
            if a.keyword.value in named:
                out.append((a.keyword.value, a.value))
        elif position >= 0:
            param = by_position.get(position)
            position += 1
            if param is not None:
                out.append((param, a.value))
    return out


def _falsy(e: Optional[cst.BaseExpression]) -> bool:
    """`False`, `None`, `0`: a literal that is false."""
    return isinstance(e, cst.Name) and e.value in ("False", "None") or isinstance(e, cst.Integer) and e.value == "0"


def consumed_elsewhere(call: cst.Call, model: "ModuleModel", scope: "Scope") -> list[str]:
    """The keys a call of a function of another project file consumes (`utils.sample(key, n)`), from the
    project's summaries (none without them)."""
    return [name for _param, name in handed(call, _consumed_elsewhere(call, model, scope), 0, refs=True)]


def imported_handoffs(call: cst.Call, model: "ModuleModel", scope: "Scope", keys: Container[str]
                      ) -> list[tuple[str, str]]:
    """(qualified name, key) for each key of `keys` a call hands to a function imported from outside the
    libraries (`utils.sample_noise(key, shape)`): what a file asks of the project's summaries when the
    same key is used again (`ModuleModel.key_handoffs`)."""
    qual = model.resolve(call.func, scope)
    local = (dotted(call.func) or "").split(".")[0]
    if qual is None or local not in model.root.imports or _library(qual):
        return []
    return [(qual, ref) for a in call.args if (ref := key_ref(a.value)) is not None and ref.split("[")[0] in keys]


def param_handoffs(fn: FunctionInfo, model: "ModuleModel") -> dict[str, str]:
    """The parameters a function of this module hands to a function imported from the project (`def
    get_batch(cfg, key): return load(cfg, key)`), each with that function's qualified name: where its
    caller's key may be consumed, which only the project's summaries tell."""
    known = model.__dict__.setdefault("_param_handoffs", {})
    if id(fn) not in known:
        params = {p.name for p in fn.params if not p.star and p.name not in fn.assigned}
        out: dict[str, str] = {}
        for call in fn.calls if params else ():
            for qual, key in imported_handoffs(call, model, fn, params):
                out.setdefault(key, qual)
        known[id(fn)] = out
    return known[id(fn)]
