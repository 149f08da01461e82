"""The semantic model of one module: scopes, traced functions and traced values, as rules and the API ask."""
from .model import ModuleModel, trace_testing_defs
from .scopes import CallableRef, ClassFacts, ClassInfo, FunctionInfo, LoopInfo, Param, ProjectClasses, Record, Scope
from .traced import ArgInfo, ExternalCall, static_param_names, target_through
from .values import Values

__all__ = [
    "ArgInfo", "CallableRef", "ClassFacts", "ClassInfo", "ExternalCall", "FunctionInfo", "LoopInfo", "ModuleModel", "Param",
    "ProjectClasses", "Record", "Scope", "Values", "static_param_names", "target_through",
]
