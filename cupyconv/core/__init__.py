"""The problem/planning core: argument rules, :class:`ConvProblem` and its roles,
and the mapping of SciPy-style calls onto problems.  Imports only the vocabulary."""
from .problem import ROLES, ConvProblem, Operands, Roles, layout_shape

__all__ = ["ConvProblem", "Operands", "Roles", "ROLES", "layout_shape"]
