"""Which array plays which part: the GEMM role table of each operation, and the
operands of one call by role name.

The three arrays keep their convolution names whatever the operation:
*activation* ``x``, *filter* ``w`` and *output* ``y`` (or ``dy``).  CUTLASS 3.x's
``convolution.h`` warns not to mix those names with the GEMM's A, B and C;
:data:`ROLES` is the one place they meet.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from .._vocabulary import FORWARD, GRAD_INPUT, GRAD_WEIGHT

__all__ = ["Roles", "ROLES", "Operands"]


@dataclasses.dataclass(frozen=True)
class Roles:
    """Which array plays the implicit GEMM's A, B and C for one operation."""

    #: the M x K operand.
    a: str
    #: the K x N operand.
    b: str
    #: the M x N result.
    c: str


#: op -> GEMM roles, as CUTLASS 3.x ``convolution.h`` (Fprop, Dgrad, Wgrad).
ROLES = {
    FORWARD: Roles(a="activation", b="filter", c="output"),
    GRAD_INPUT: Roles(a="output", b="filter", c="activation"),
    GRAD_WEIGHT: Roles(a="output", b="activation", c="filter"),
}


@dataclasses.dataclass(frozen=True)
class Operands:
    """The arrays of one call, by convolution role (logical channels-first views).

    ``activation`` is ``x`` ``(N, C, *S)``, ``filter`` is ``w``
    ``(K, C/G, *KS)`` and ``output`` is ``y`` or ``dy`` ``(N, K, *O)``.  An
    operation reads two of them (:data:`ROLES` ``a`` and ``b``) and computes
    the third (``c``), which is ``None`` here.
    """

    activation: Any = None
    filter: Any = None
    output: Any = None

    def get(self, role):
        """The array of a role name."""
        return getattr(self, role)

    def replace(self, **arrays):
        """A copy with some roles replaced."""
        return dataclasses.replace(self, **arrays)
