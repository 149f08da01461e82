"""The semantic model of one module: scopes, traced functions and traced values, as rules and the API ask."""
from .model import ModuleModel, may_test_for_a_trace, trace_testing_defs
from .scopes import (
    NO_ANSWER, Asked, CallableRef, ClassFacts, ClassInfo, FunctionInfo, LoopInfo, Param, ProjectClasses, Record, Scope,
    compact, replay,
)
from .traced import ArgInfo, ExternalCall, static_param_names, target_through
from .values import Values

__all__ = [
    "NO_ANSWER", "ArgInfo", "Asked", "CallableRef", "ClassFacts", "ClassInfo", "ExternalCall", "FunctionInfo", "LoopInfo",
    "ModuleModel", "Param", "ProjectClasses", "Record", "Scope", "Values", "compact", "may_test_for_a_trace", "replay",
    "static_param_names", "target_through", "trace_testing_defs",
]
