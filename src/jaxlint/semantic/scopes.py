"""The records the model keeps: scopes, classes, functions, parameters, loops, bindings, callable references."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import libcst as cst

from ..findings import TraceTarget
from ..syntax import dotted, name_counts, only_called


# ---------------------------------------------------------------------------------------------
# Scopes


@dataclass
class Param:
    name: str
    index: Optional[int]  # position among positional parameters, None for keyword-only/star
    annotation: Optional[str]
    has_default: bool
    default: Optional[cst.BaseExpression]
    star: str = ""  # "", "*" or "**"
    annotation_expr: Optional[cst.BaseExpression] = None  # the annotation as written (`js.model.Model`)


@dataclass(eq=False)
class Scope:
    kind: str  # module | class | function
    name: str
    qualname: str
    parent: Optional["Scope"]
    node: Optional[cst.CSTNode] = None
    imports: dict[str, str] = field(default_factory=dict)
    # names imported as different modules in this scope (`import jax.numpy as np` … `import numpy as np`):
    # which one a use sees depends on when it runs, so they resolve to nothing certain
    ambiguous_imports: set[str] = field(default_factory=set)
    defs: dict[str, "FunctionInfo"] = field(default_factory=dict)
    # name -> every `def` of it in this scope, with its source-order stamp (a name defined twice)
    def_history: dict[str, list[tuple[int, "FunctionInfo"]]] = field(default_factory=dict)
    classes: dict[str, "ClassInfo"] = field(default_factory=dict)
    # name -> value expressions assigned to it (None where the value is not a plain expression)
    assigned: dict[str, list[Optional[cst.BaseExpression]]] = field(default_factory=dict)
    declared_global: set[str] = field(default_factory=set)
    declared_nonlocal: set[str] = field(default_factory=set)
    # name -> source-order stamps of its bindings in this scope (for "rebound after the def")
    bind_order: dict[str, list[int]] = field(default_factory=dict)
    bind_loops: dict[str, list[Optional["LoopInfo"]]] = field(default_factory=dict)  # the loop of each binding
    # (name, stamp of a binding by a one-target `=`) -> the whole target and value of that statement
    # (`a, b = tree_map(f, (a, b))` binds each name from its place in the target)
    bound_from: dict[tuple[str, int], tuple[cst.BaseExpression, cst.BaseExpression]] = field(default_factory=dict)
    # id of a value bound with an annotation (`bounds: jax.Array = f(x)`) -> the annotation's head name
    # (NumPy's keeping their module, as a parameter's) and the annotation as written
    annotated: dict[int, tuple[str, cst.BaseExpression]] = field(default_factory=dict)
    order: int = 0  # source-order stamp of the scope's definition

    def binds(self, name: str) -> bool:
        return name in self.assigned or name in self.defs or name in self.classes or name in self.imports

    def function_scope(self) -> Optional["FunctionInfo"]:
        s: Optional[Scope] = self
        while s is not None and not isinstance(s, FunctionInfo):
            s = s.parent
        return s


@dataclass(frozen=True)
class ClassFacts:
    """What a file says about one of its module-level classes, for the other files of the project."""

    pytree: bool
    fields: frozenset[str] = frozenset()
    static_fields: frozenset[str] = frozenset()
    # Methods that return only Python values for a traced instance (`def dofs(self) -> int:` summing
    # static fields): `model.dofs()` is static in the other files.
    static_methods: frozenset[str] = frozenset()
    container: bool = False  # a Mapping, dict, list or Sequence subclass
    # Methods annotated to return a class (`def _get_subset(self, ...) -> VarValues`): method -> the
    # class's qualified name (absolute once the project index has read the file).
    method_classes: "dict[str, str]" = field(default_factory=dict, hash=False, compare=False)
    # Fields annotated with a class (`joints: params.Joints`): field -> the class's qualified name.
    field_classes: "dict[str, str]" = field(default_factory=dict, hash=False, compare=False)
    # Properties that compute only Python values from the instance (`def dim(self): return self.pos.shape[-1]`):
    # `state.dim` is static in the other files.
    static_properties: frozenset[str] = frozenset()
    # The model framework the class is a module of (eqx, nnx, linen, haiku), through its bases; None if none.
    module_kind: Optional[str] = None
    # Attributes an nnx Module class gives a Python scalar (`hidden_size: int`, `self.name = "x"`): nnx keeps
    # them as static pytree metadata, so they stay Python values wherever an instance is traced.
    python_attributes: frozenset[str] = frozenset()
    registers_subclasses: bool = False  # its `__init_subclass__` registers every subclass as a pytree
    registers_classes: bool = False  # a metaclass that registers every class it makes as a pytree
    # Its base classes (absolute once the project index has read the file), to find a class's subclasses.
    bases: tuple[str, ...] = ()
    # Methods its own methods store on the instance (`self.next = self.next` in `__post_init__`): reading
    # `obj.next` gives that one stored object, not a new bound method.
    pinned_methods: frozenset[str] = frozenset()
    # Instances compare and hash by identity (a plain class: no base but `object`, no decorator, no
    # `__eq__`/`__hash__`): two instances are never equal, so as static arguments they never share a trace.
    identity_hash: bool = False


@dataclass
class ProjectClasses:
    """Classes of the project's other files: a subclass of a pytree class defined elsewhere is a pytree,
    and an attribute named like a static field of some project pytree reads a Python value when the
    object's class is not known here."""

    lookup: "Callable[[str], Optional[ClassFacts]]"  # a qualified name as this module resolves it
    # Whether some pytree class of the project (or one this module imports) declares an attribute of
    # this name static: asked per name, so only the files that could tell are read.
    static_name: "Callable[[str], bool]" = lambda name: False
    # Whether a function of another project file returns only Python values whatever its arguments
    # (`tree_utils.first_dim(x)` returning `leaves[0].shape[0]`): a qualified name as this module resolves it.
    static_return: "Callable[[str], bool]" = lambda qualname: False
    # Whether a function of another project file is annotated to return a Python container (`-> list`).
    container_return: "Callable[[str], bool]" = lambda qualname: False
    # What a function of another project file tests when it only tests for a trace (see `guard_helper`):
    # "tracer" / "tracers" (its argument is a tracer), "tracing" (a transform is running), else None.
    guard_helper: "Callable[[str], Optional[str]]" = lambda qualname: None
    # Whether a function of another project file registers the class it is given as a pytree.
    registers: "Callable[[str], bool]" = lambda qualname: False
    # Whether another file of the project calls something by this name (who may call a setter).
    mentioned_elsewhere: "Callable[[str], bool]" = lambda name: True
    # Whether another file that names this module calls something by this name (`from .driver import
    # solve`, then `solve(...)`).
    called_by_importer: "Callable[[str], bool]" = lambda name: False
    # Whether another file mentions this name at all (outside comments).
    named_elsewhere: "Callable[[str], bool]" = lambda name: True
    # Whether another given file may set this module's global of that name (`solver.DEBUG = True`).
    set_elsewhere: "Callable[[str], bool]" = lambda name: True
    # For each call another given file makes of something by this name, whether it sits in a loop there
    # (unknown alone: one call, in a loop).
    loop_calls_elsewhere: "Callable[[str], list[bool]]" = lambda name: [True]
    # Whether another given file mentions an attribute of this name (`obj.pe`).
    attribute_elsewhere: "Callable[[str], bool]" = lambda name: True
    # Whether every method of this name that the project's files define returns only Python values
    # (`transform.get_batch_axes()` returning `self.parameters().shape[:-1]`, the receiver's class unknown).
    static_method: "Callable[[str], bool]" = lambda name: False
    # Whether another given file of the project defines a function or method of this name (so that
    # `obj.train(...)`, the receiver's class unknown, may run either).
    defined_elsewhere: "Callable[[str], bool]" = lambda name: False
    # Whether the project's files define properties of this name, each returning only Python values, and
    # store no attribute of that name (`batch.rollout.num_action_tokens` with `rollout` of unknown class).
    static_property: "Callable[[str], bool]" = lambda name: False
    # Whether a decorator of another project file runs the function it wraps through a host callback
    # (`jax.debug.callback`): the decorated body runs on the host with concrete values.
    host_decorator: "Callable[[str], bool]" = lambda qualname: False
    # A function of another project file returning a tuple: True for each element that is a Python value
    # whatever the arguments (`batch_shape, total, n, payload = prepare(b)`), None when not known.
    static_elements: "Callable[[str], Optional[tuple[bool, ...]]]" = lambda qualname: None
    # A function of another project file: its parameters declared Python values (`block: int`, `mode: str`).
    python_params: "Callable[[str], Optional[tuple[tuple[str, Optional[int]], ...]]]" = lambda qualname: None
    # A function of another project file that consumes a PRNG key it is given (samples from it or splits
    # it): the consumed parameters with their positions (None for keyword-only); None when it consumes none.
    key_params: "Callable[[str], Optional[tuple[tuple[str, Optional[int]], ...]]]" = lambda qualname: None
    # The classes of the project's other files deriving from a class of this module (by its name here).
    subclasses: "Callable[[str], list[ClassFacts]]" = lambda name: []
    # Whether a function of another project file returns a static (aux data) field declaration
    # (`def frozen_field(**kw): return tc.field(on_setattr=[tc.freeze], **kw)`), so a class-body default
    # made by it declares a static field.
    static_field_maker: "Callable[[str], bool]" = lambda qualname: False
    # A function of another project file whose argument sets a field's leafness (see
    # `ModuleModel.field_switch`): (parameter, position, truth making it static, whether the default does).
    field_switch: "Callable[[str], Optional[tuple[str, Optional[int], bool, bool]]]" = lambda qualname: None
    # Whether a name of another project file is a type alias admitting a NumPy array
    # (`Array = Union[np.ndarray, jax.Array]`): what it annotates may be a mutable NumPy array.
    numpy_alias: "Callable[[str], bool]" = lambda qualname: False
    # A module-level name of another project file bound once to an integer literal (`trials = 1`): its value.
    int_constant: "Callable[[str], Optional[int]]" = lambda qualname: None
    # Whether a name of another project file is a module-level def there (not a class).
    plain_function: "Callable[[str], bool]" = lambda qualname: False
    # Whether some given file of the project imports this top-level package (`genjax`): a project built on
    # it hands its wrappers (`Pytree.const(h)`) to files that never import it themselves.
    package_imported: "Callable[[str], bool]" = lambda package: False



# A question a pass without the project took an answer for (`ModuleModel.ask`): the `ProjectClasses` field,
# its arguments, the answer taken.
Asked = tuple[str, tuple, Any]


class _NoAnswer:
    """An answer taken that no answer of the project equals: recorded where the pass without the project
    decides in a way no answer would make the project's pass decide too."""

    def __eq__(self, other: object) -> bool:
        return False

    def __hash__(self) -> int:
        return 0

    def __repr__(self) -> str:
        return "NO_ANSWER"


NO_ANSWER = _NoAnswer()


def compact(asked: list[Asked]) -> list[Asked]:
    """The questions asked, each with each answer taken once (in the order first asked)."""
    taken: dict[tuple[str, tuple], list[Any]] = {}
    out: list[Asked] = []
    for question, args, answer in asked:
        seen = taken.setdefault((question, args), [])
        if not any(t is answer or t == answer for t in seen):
            seen.append(answer)
            out.append((question, args, answer))
    return out


def replay(project: ProjectClasses, asked: list[Asked]) -> bool:
    """Whether the project answers every question a pass without it asked as that pass took it. The
    analysis asks only what its path so far leads it to ask, so with the same answers the project's pass
    of the same file takes the same path and finds the same: it need not run. Stops at the first answer
    that differs (each distinct question is put once)."""
    seen: dict[tuple[str, tuple], Any] = {}
    for question, args, taken in asked:
        key = (question, args)
        if key not in seen:
            seen[key] = getattr(project, question)(*args)
        if not seen[key] == taken:
            return False
    return True

@dataclass(eq=False)
class ClassInfo(Scope):
    bases: list[str] = field(default_factory=list)
    decorators: list[str] = field(default_factory=list)
    # Registered pytrees: annotated fields, and those that are aux data (static Python values, not
    # leaves): `field(metadata={"static": True})`, `struct.field(pytree_node=False)`,
    # `eqx.field(static=True)`, `static_field()`, `meta_fields=[...]`, a `tree_flatten`'s aux part.
    fields: set[str] = field(default_factory=set)
    static_fields: set[str] = field(default_factory=set)
    pytree: bool = False
    field_types: dict[str, cst.BaseExpression] = field(default_factory=dict)  # annotated fields, as written
    container: bool = False  # a Mapping, dict, list or Sequence subclass: its truth is its emptiness
    # Python's class hooks registering pytrees: `__init_subclass__` registers each subclass as it is
    # created (the class itself is no pytree); a metaclass registers each class made with it.
    registers_subclasses: bool = False
    registers_classes: bool = False


@dataclass(eq=False)
class FunctionInfo(Scope):
    params: list[Param] = field(default_factory=list)
    is_method: bool = False  # first parameter is self/cls
    is_classmethod: bool = False  # `@classmethod`: `Class.method(...)` binds the first parameter too
    cls: Optional[ClassInfo] = None
    loop_at_def: Optional["LoopInfo"] = None
    arms_at_def: tuple[tuple[object, bool], ...] = ()  # the if/else arms around the def (as `event_branches`)
    decorators: list[cst.Decorator] = field(default_factory=list)
    # Binding events in this function body: (target, value, how) — how is "=", "aug", "for", "with", "walrus".
    events: list[tuple[cst.BaseExpression, Optional[cst.BaseExpression], str]] = field(default_factory=list)
    event_orders: list[int] = field(default_factory=list)  # source-order stamp of each event
    # The if/else arms around each event: (the `if` node's id, or the name an `if flag:` tests; in its body)
    event_branches: list[tuple[tuple[object, bool], ...]] = field(default_factory=list)
    calls: list[cst.Call] = field(default_factory=list)
    # Trace state, filled in by the model.
    traced: bool = False
    abstract: bool = False
    cached: bool = False
    # traced somewhere by a transform that stages its body (jit, a `lax` loop, a caller that stages):
    # under `vmap` or `grad` alone a JAX call on Python values computes a concrete array
    staged: bool = False
    # decorated with `jax.jit` and its static parameters known: every call passes through jit, which makes
    # each other argument a tracer (and rejects a string)
    jit_entry: bool = False
    transforms: set[str] = field(default_factory=set)
    traced_params: set[str] = field(default_factory=set)
    # Where traced_params come from: transforms and callers without a call site (only ever grow), and each
    # traced call site's latest answer (id of the call -> parameters), replaced as its caller is re-solved.
    seed_params: set[str] = field(default_factory=set)
    site_params: dict[int, frozenset[str]] = field(default_factory=dict)
    # The same, from transforms and call sites that trace abstractly (jit, vmap, a staged caller): a
    # parameter traced only where values stay concrete (`grad` alone) holds a concrete value or a Python
    # one wherever the function is traced abstractly.
    abstract_seed: set[str] = field(default_factory=set)
    abstract_sites: set[int] = field(default_factory=set)
    # id of each traced call site -> the function making it and the call
    site_calls: dict[int, tuple["FunctionInfo", cst.Call]] = field(default_factory=dict)
    # Parameters that are Python values whoever calls: nondiff arguments of a custom_vjp/custom_jvp.
    declared_static: set[str] = field(default_factory=set)
    # `**kw` under an equinox filter transform, which passes non-array values through: a key read with a
    # literal default (`kw.pop("flag", False)`) holds a Python value.
    python_kwargs: bool = False
    # Where a transform is applied to this function: (scope, source-order stamp); -1 for a decorator.
    trace_sites: set[tuple[Scope, int]] = field(default_factory=set)
    # Where traced code calls this function directly: (calling scope, stamp); (module, -1) when unknown.
    helper_sites: set[tuple[Scope, int]] = field(default_factory=set)
    # `if x is None: return …` at the top level of this body: (stamp after the if, x). Past it, x is not None.
    none_exits: list[tuple[int, str]] = field(default_factory=list)
    # `if x is not None: … return` outside loops: (stamp of the if, stamp after it, x, the if arms around it).
    # A binding of x made before it, in the same block or deeper, reaches past it only as None.
    none_past: list[tuple[int, int, str, tuple]] = field(default_factory=list)
    # Parameters every traced call site gives a value other than None (None until a site is seen).
    passed: Optional[set[str]] = None
    # Parameters defaulting to None that every traced call site leaves out or passes None (None until a
    # site is seen; a site whose arguments are not known leaves none).
    left_none: Optional[set[str]] = None
    # The same, site by site: what each traced call site leaves None (`left_none` is their intersection).
    left_none_sites: list[frozenset[str]] = field(default_factory=list)
    # Traced call sites whose arguments are known, by call: (caller, offset, partial-bound names, args).
    flag_sites: dict[int, tuple] = field(default_factory=dict)
    # Traced from somewhere whose arguments are not known here (a transform, a control-flow body).
    flags_open: bool = False
    # Transform applications whose arguments are known (`jax.vmap(f, in_axes=...)(params, batch)`), by call:
    # (offset, partial-bound names, args). A transform keeps a container argument a container (of
    # tracers), so these join the call sites that say which parameters hold containers; its flags do not.
    container_sites: dict[int, tuple] = field(default_factory=dict)
    containers_open: bool = False  # traced from somewhere else whose arguments are not known
    # Parameters every call site fills with a Python container (part of container_names, which also
    # holds names the body uses as containers): `pair == ignore` compares the container, not its leaves.
    site_containers: set[str] = field(default_factory=set)
    # Parameters that receive a tuple of this length wherever the function runs, with whether each element
    # is traced: a custom_vjp backward rule's residuals, as every `return` of the forward rule builds them.
    param_elements: dict[str, tuple[bool, ...]] = field(default_factory=dict)
    # What traced call sites put in the `**kwargs` parameter: the keys every site names (with whether
    # some site gives a traced value), None until a site is seen; and whether the rest can be traced.
    kw_keys: Optional[dict[str, bool]] = None
    kw_rest: bool = False
    # Parameters with the same truthiness at every traced call site (`use_jax=True`): a branch on the
    # other truth value never runs traced.
    flags: dict[str, bool] = field(default_factory=dict)
    # What a parameter can hold wherever the function is traced, for the parameters every place that
    # traces it says: "True", "False", "None" (those objects), "str:" and a string literal's text,
    # "tracer", or "value" (anything else, a tracer or not). `flag is True` where `flag` is a tracer or
    # a literal False at every trace, or
    # `not isinstance(x, jax.core.Tracer)` where `x` is always a tracer, is a Python constant there.
    idents: dict[str, frozenset[str]] = field(default_factory=dict)
    # What the transforms that trace it pass (caller, ((parameter, values or the caller's parameter
    # passed on), ...)); and whether something traces it whose arguments are not known.
    ident_entries: set[tuple] = field(default_factory=set)
    idents_open: bool = False
    # Parameters that receive a whole pytree JAX flattened (a transform's own arguments, or such a
    # value passed straight on): their attributes are leaves, hence traced. Other traced objects may
    # be mixed Python objects whose attributes are configuration.
    pytree_params: set[str] = field(default_factory=set)
    pytree_names: set[str] = field(default_factory=set)
    traced_names: set[str] = field(default_factory=set)
    # The names each binding event (by index in `events`) binds to a traced value: a name read in
    # straight-line code is traced only when a binding that reaches the read is.
    event_traced: list[set[str]] = field(default_factory=list)
    container_names: set[str] = field(default_factory=set)
    dict_names: set[str] = field(default_factory=set)  # names holding dicts: iterating them gives keys
    # Names unpacked into two or more targets (`key, value = cache`): their truth is a length test, since
    # an array of two or more elements has no truth value at all, traced or not.
    unpacked_names: set[str] = field(default_factory=set)
    key_subscripts: set[tuple[str, str]] = field(default_factory=set)  # (d, k) for each `d[k]` in the body
    string_keyed: set[str] = field(default_factory=set)  # names the body indexes with a string: mappings
    target: Optional[TraceTarget] = None
    top: Optional[int] = None  # index of the enclosing top-level statement

    @property
    def local_names(self) -> set[str]:
        names = {p.name for p in self.params}
        names.update(self.assigned, self.defs, self.classes, self.imports)
        return names - self.declared_global - self.declared_nonlocal

    @property
    def concrete_params(self) -> set[str]:
        """Parameters of a function traced abstractly somewhere that only sites tracing concretely (`grad`
        alone) make traced, and the body never rebinds: where the function is traced abstractly they hold
        what their callers give, and where they are tracers their values are known."""
        if not self.abstract:
            return set()
        abstract = self.abstract_seed.union(*(ps for k, ps in self.site_params.items() if k in self.abstract_sites))
        return {n for n in self.traced_params - abstract if n not in self.assigned}

    @property
    def is_accessor(self) -> bool:
        """A property's getter, setter or deleter (`@property`, `@cached_property`, `@x.setter`): reading or
        setting the attribute runs it, and a call of the attribute calls what the getter returned."""
        return any((dotted(d.decorator) or "").rpartition(".")[2] in _ACCESSORS for d in self.decorators)

    @property
    def shadowed(self) -> bool:
        """A def its class body defines again further down: this one is never bound."""
        return isinstance(self.parent, ClassInfo) and self.parent.defs.get(self.name) is not self

    def param(self, name: str) -> Optional[Param]:
        for p in self.params:
            if p.name == name:
                return p
        return None

    def bindings(self, name: str, before: Optional[cst.CSTNode] = None) -> list["Binding"]:
        """Each binding of the local `name` in this body, in source order (only those before the event
        whose target is `before`, when given; none when no event has that target). A tuple target assigned a tuple of the same length binds
        element by element; any other tuple target records the element's index in the unpacked value."""
        out: list[Binding] = []
        arms: dict[int, bool] = {}
        if before is not None:  # a binding in the other arm of an `if` around `before` does not reach it
            for (target, _v, _h), branches in zip(self.events, self.event_branches):
                if target is before:
                    arms = dict(branches)
                    break
        for (target, value, how), branches in zip(self.events, self.event_branches):
            if before is not None and target is before:
                return out
            if arms and any(arms.get(node, arm) != arm for node, arm in branches
                            if not isinstance(node, str) or node not in self.assigned):
                continue
            if isinstance(target, cst.Name):
                if target.value == name:
                    out.append(Binding(target, value, how))
                continue
            if not isinstance(target, (cst.Tuple, cst.List)):
                continue
            names = [el.value.value if isinstance(el.value, cst.Name) else None for el in target.elements]
            if name not in names:
                continue
            index = names.index(name)
            if how == "=" and isinstance(value, (cst.Tuple, cst.List)) and len(value.elements) == len(names) \
                    and not any(isinstance(el, cst.StarredElement) for el in value.elements):
                out.append(Binding(target, value.elements[index].value, how))
            else:
                out.append(Binding(target, None, how, unpacked=(value, index)))
        return out if before is None else []


@dataclass
class Binding:
    """One binding of a name in a function body."""

    target: cst.BaseExpression
    value: Optional[cst.BaseExpression]  # the value bound to the name itself; None when not known
    how: str  # "=", "aug", "for", "with", "walrus"
    # For `a, b = f(x)`: (the whole value unpacked, the name's index in the target).
    unpacked: Optional[tuple[Optional[cst.BaseExpression], int]] = None

    @property
    def assigned(self) -> Optional[cst.BaseExpression]:
        """The value of a plain `=` binding, else None."""
        return self.value if self.how == "=" else None

    @property
    def source(self) -> Optional[cst.BaseExpression]:
        """The value bound, or the whole value it was unpacked from (`f(x)` of `a, b = f(x)`)."""
        return self.value if self.value is not None else self.unpacked[0] if self.unpacked else None


@dataclass(eq=False)
class LoopInfo:
    node: cst.CSTNode  # For, While, or a comprehension
    parent: Optional["LoopInfo"]
    scope: Scope
    # names bound inside the loop body (assignments), with their values
    bound: dict[str, list[Optional[cst.BaseExpression]]] = field(default_factory=dict)

    def encloses(self, other: Optional["LoopInfo"]) -> bool:
        while other is not None:
            if other is self:
                return True
            other = other.parent
        return False


@dataclass
class Record:
    """A node some rule wants to see, with where it sits."""

    node: cst.CSTNode
    scope: Scope
    loop: Optional[LoopInfo]
    guards: frozenset[str] = frozenset()  # names proven Python scalars by enclosing `if isinstance(...)`
    top: Optional[int] = None  # index of the enclosing top-level statement (None: the module itself)


@dataclass
class CallableRef:
    """A callable expression resolved to a function of this module."""

    fn: FunctionInfo
    offset: int = 0  # leading parameters already bound (self of a bound method, partial's positional args)
    bound_names: frozenset[str] = frozenset()  # parameters bound by partial keywords
    lead: int = 0  # leading call arguments the function does not receive (`variables` of linen's `apply`)
    receiver: Optional[cst.BaseExpression] = None  # the instance a method is called on, when it is an argument


# ---------------------------------------------------------------------------------------------
# Branches that never run traced, from what the call sites of a function say.


def dead_branch(fn: FunctionInfo, guards: frozenset[str]) -> bool:
    """`if rng is None:` where every traced caller passes an `rng`, or where `rng` is a variable of the
    enclosing function known not to be None wherever the function is traced: the branch never runs traced.
    `if use_jax: … else: …` where every traced caller passes `use_jax=True`: the `else` never runs traced.
    `if check is True:` where `check` is a tracer or a literal False wherever the function is traced;
    `if loop == "python":` where `loop` is the string "lax" wherever the function is traced."""
    for g in guards:
        if g == "never:":
            return True  # `if "jax" in np.__name__:` with `np` NumPy
        if g == "eager:" and not fn.transforms & UNSTAGED:
            return True  # a branch taken only with jit disabled: jit and lax bodies then run eagerly
        if g.startswith(("true:", "false:")):
            want, _, name = g.partition(":")
            if fn.flags.get(name, want == "true") != (want == "true"):
                return True
            kinds = fn.idents.get(name, frozenset()) if name not in fn.flags else frozenset()
            if fn.abstract and kinds & {"True", "False"}:
                # a flag defaulting to a bool: where a trace passes it, it is a tracer and the test itself
                # raises, so only the literal values can take an arm
                kinds = kinds - {"tracer", "value"}
            truths = {_ident_truth(k) for k in kinds}
            if truths and None not in truths and (want == "true") not in truths:
                return True  # `if not jit_safe:` where every transform passes `jit_safe` a literal True
            parent = fn.parent
            if isinstance(parent, FunctionInfo) and name not in fn.local_names and parent.param(name) is not None \
                    and name not in parent.assigned and called_only_by_parent(fn) and dead_branch(parent, frozenset({g})):
                return True  # the enclosing function's flag, read by a helper it only calls
            continue
        if g.startswith("notracer!:"):
            if _always_traced_local(fn, g[10:]):
                return True  # `x = jnp.asarray(x)` before `if not is_tracer(x):`: a tracer wherever traced
            continue
        if g.startswith(("is:", "isnot:", "notracer:")):
            how, _, rest = g.partition(":")
            const, _, name = rest.rpartition(":")
            can = fn.idents.get(name)
            if can is not None and (can == {"tracer"} if how == "notracer" else
                                    const not in can if how == "is" else not can - {const}):
                return True  # (a tracer is never `True`, `False` or `None`, and always a `Tracer`)
            if how == "notracer" and fn.param(name) is None and _always_traced_local(fn, name):
                return True  # `x = features.get("x")` from a traced dict: a tracer wherever it is tested
            continue
        if g.startswith(("eq:", "neq:")):
            how, _, rest = g.partition(":")
            text, _, name = rest.rpartition(":")
            can = fn.idents.get(name)
            if can is not None and how == "eq" and _through_jit(fn, name):
                can = can - {"value"}  # (what a caller passes it becomes a tracer, or jit rejects a string)
            if can is not None and (can == {"str:" + text} if how == "neq" else
                                    "str:" + text not in can and "value" not in can):
                # `if loop == "python":` where every traced caller leaves `loop="lax"` (a tracer is never
                # equal to a string: the comparison falls back to identity, a Python False)
                return True
            continue
        if g.startswith(("given:", "given@:")):
            entry, _, name = g.partition(":")
            if fn.left_none is not None and name in fn.left_none and (entry == "given@" or name not in fn.assigned):
                return True  # `if radius is not None:` where no traced caller gives a radius
            continue
        if not g.startswith("none:"):
            continue
        name = g[5:]
        if fn.passed is not None and name in fn.passed:
            return True
        if name not in fn.local_names and _closure_not_none(fn, name):
            return True
    # `if rt0 is None: ... elif major is not None and float(major) != rt0:` where each traced caller
    # leaves one of the two None (one gives `rt0`, another `major`): no call takes the branch
    given = {g.partition(":")[2] for g in guards if g.startswith("given@:")} | {
        g[6:] for g in guards if g.startswith("given:") and g[6:] not in fn.assigned}
    return len(given) > 1 and fn.left_none is not None and bool(fn.left_none_sites) \
        and all(site & given for site in fn.left_none_sites)


def _always_traced_local(fn: FunctionInfo, name: str) -> bool:
    """Whether every binding of a local of a traced function binds a traced value (known once the
    function's values are solved)."""
    if not fn.traced or name in fn.declared_global or name in fn.declared_nonlocal \
            or len(fn.event_traced) != len(fn.events):
        return False
    binds = [i for i, (target, _value, _how) in enumerate(fn.events)
             if isinstance(target, cst.Name) and target.value == name]
    return bool(binds) and all(name in fn.event_traced[i] for i in binds) \
        and len(binds) == len(fn.assigned.get(name, []))


def _through_jit(fn: FunctionInfo, name: str) -> bool:
    """Whether `name` is a parameter of a jitted function (`FunctionInfo.jit_entry`) that is not static."""
    p = fn.param(name)
    return fn.jit_entry and p is not None and not p.star and name not in fn.declared_static


_ACCESSORS = frozenset({"property", "cached_property", "setter", "getter", "deleter", "abstractproperty"})


def never_mentioned(fn: Scope) -> bool:
    """A def nested in a function that never names it again (no call, no hand-off, no return): it never runs."""
    parent = fn.parent
    return isinstance(fn, FunctionInfo) and isinstance(fn.node, cst.FunctionDef) and isinstance(parent, FunctionInfo) \
        and parent.node is not None and name_counts(parent.node)[0].get(fn.name, 0) <= 1


def called_only_by_parent(fn: Scope) -> bool:
    """A def nested in a function that only calls it there (never hands it on, stores or returns it)."""
    parent = fn.parent
    return isinstance(fn, FunctionInfo) and isinstance(parent, FunctionInfo) and parent.node is not None \
        and parent.defs.get(fn.name) is fn and fn.name not in parent.assigned and only_called(parent.node, fn.name)


def _ident_truth(kind: str) -> Optional[bool]:
    """The truth of what an identity test sees (see `FunctionInfo.idents`), when that says it."""
    if kind in ("True", "False", "None"):
        return kind == "True"
    return bool(kind[4:]) if kind.startswith("str:") else None


# Transforms that trace even with jit disabled (they are not staging): vmap, grad and their kin.
UNSTAGED = frozenset({"vmap", "grad", "value_and_grad", "jacfwd", "jacrev", "hessian", "jvp", "vjp", "linearize"})
# Of those, the transforms that only differentiate: their tracers carry concrete primals.
DIFFERENTIATING = UNSTAGED - {"vmap"}


def _closure_not_none(fn: FunctionInfo, name: str) -> bool:
    """Whether every place that traces `fn` sits in its enclosing function past an `if name is None:
    return …`, or past such a test of an alias bound to `name` just before it (`nbrs = neighbors`)."""
    owner = fn.parent
    sites = fn.trace_sites | fn.helper_sites
    if not isinstance(owner, FunctionInfo) or not sites or name in owner.declared_nonlocal \
            or name in owner.declared_global:
        return False
    if owner.param(name) is None and name not in owner.assigned:
        return False
    proofs: list[int] = []  # stamps from which `name` is known not to be None
    for stamp, tested in owner.none_exits:
        if tested == name:
            proofs.append(stamp)
            continue
        latest = None  # the binding of `tested` in force at the test
        for (target, value, how), at in zip(owner.events, owner.event_orders):
            if at < stamp and isinstance(target, cst.Name) and target.value == tested:
                latest = value if how == "=" else None
        if isinstance(latest, cst.Name) and latest.value == name:
            proofs.append(stamp)
    for scope, order in sites:
        if scope is not owner or order < 0:
            return False
        before = [stamp for stamp in proofs if stamp < order]
        if not before or any(max(before) < stamp < order for stamp in owner.bind_order.get(name, [])):
            return False  # no test before the site, or `name` rebound between the test and the site
    return True
