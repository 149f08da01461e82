"""Which functions consume a PRNG key they are given: sample from it or split it, here or in a helper."""
from __future__ import annotations

from typing import TYPE_CHECKING, Container, Optional

import libcst as cst

from ..jaxapi import KEY_MAKERS
from ..syntax import _target_names, descendants, dotted
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
    qual = model.resolve(call.func, scope) if model.project is not None else None
    if qual is None or _library(qual):
        return []
    return list(model.project.key_params(qual) or ())  # type: ignore[union-attr]


def key_consumers(model: "ModuleModel") -> dict[int, set[str]]:
    """Functions of this module that consume a key parameter (sample from it or split it, directly,
    through another such function of the module, or through one of another project file): id of the
    function -> names of those parameters."""
    cached = model.__dict__.get("_key_consumers")
    if cached is not None:
        return cached
    # Once per function: the key parameters it samples from or splits itself, and the calls that hand a
    # parameter on to another function of the module (resolved once, not on every pass).
    plans: list[tuple[int, set[str], list[tuple[int, list[tuple[str, str]]]]]] = []
    conditions: dict[tuple[int, str], frozenset[str]] = {}
    for fn in model.functions:
        # a parameter rebound in the body (`rng = fold_in(rng, step)`) is not what gets consumed
        params = {p.name for p in fn.params if not p.star and p.name not in fn.assigned}
        if not params:
            continue
        direct: set[str] = set()
        via: list[tuple[int, list[tuple[str, str]]]] = []
        # flag parameters off by default (`shuffle=False`) that must be true for a key to be drawn from
        switches = {p.name for p in fn.params if p.has_default and _falsy(p.default) and p.name not in fn.assigned}

        # parameters that default to None, drawn from only in a branch of `if x is None:` (the key feeds
        # a sampler only when the caller left `x` out: `if x_prop is None: x_prop = sample(key, ...)`)
        optional = {p.name for p in fn.params if p.has_default and isinstance(p.default, cst.Name)
                    and p.default.value == "None"}

        def note(name: str, call: cst.Call) -> None:
            guards = model.call_guards.get(id(call), ())
            needed = frozenset([g[5:] for g in guards if g[5:] in switches and g.startswith("true:")]
                               + [g for g in guards if g.startswith("none:") and g[5:] in optional])
            key = (id(fn), name)
            conditions[key] = conditions[key] & needed if key in conditions else needed

        for call in fn.calls:
            q = model.resolve(call.func, fn) or ""
            fname = q[len("jax.random."):] if q.startswith("jax.random.") else None
            if fname is not None and fname not in KEY_MAKERS and fname != "fold_in" and "." not in fname:
                name = key_arg(call)
                if name in params and not draws_unused(call, fn):
                    direct.add(name)  # type: ignore[arg-type]
                    note(name, call)  # type: ignore[arg-type]
                continue
            if not any(isinstance(a.value, cst.Name) and a.value.value in params for a in call.args):
                continue
            ref = model.callee(call, fn)
            if ref is None:  # `utils.sample_noise(key, shape)` of another project file
                consumed = _consumed_elsewhere(call, model, fn)
                for _param, name in handed(call, consumed, 0):
                    if name in params:
                        direct.add(name)
                        note(name, call)
                continue
            hands = [(param, name) for param, name in handed(call, signature(ref.fn), ref.offset) if name in params]
            if hands:
                via.append((id(ref.fn), hands))
                for _param, name in hands:
                    note(name, call)
        if direct or via:
            plans.append((id(fn), direct, via))
    model.__dict__["_key_conditions"] = {k: v for k, v in conditions.items() if v}
    out: dict[int, set[str]] = {}
    grew = True
    while grew:  # through helpers that hand the key on, to a fixed point
        grew = False
        for fid, direct, via in plans:
            found = set(direct)
            for callee_id, hands in via:
                consumed = out.get(callee_id)
                if consumed:
                    found.update(name for param, name in hands if param in consumed)
            if found - out.get(fid, set()):
                out.setdefault(fid, set()).update(found)
                grew = True
    model.__dict__["_key_consumers"] = out
    return out


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


def module_key_params(model: "ModuleModel") -> dict[str, tuple[ConsumedParam, ...]]:
    """The module-level functions that consume a key parameter, by name, with the consumed parameters and
    their positions: what another file of the project needs to know about them."""
    consumers = key_consumers(model)
    out: dict[str, tuple[ConsumedParam, ...]] = {}
    for name, fn in model.root.defs.items():
        consumed = consumers.get(id(fn))
        if consumed:
            out[name] = tuple((p, i) for p, i in signature(fn) if p in consumed)
    return out
