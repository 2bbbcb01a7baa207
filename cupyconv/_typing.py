"""Type aliases of the public signatures (annotations only: nothing here runs).

CuPy ships no type stubs, so an array that may live on either device is ``Any``;
the aliases say what each argument means to a reader and to mypy.
"""
from __future__ import annotations

from typing import Any, Dict, Sequence, Tuple, Union

from numpy.typing import DTypeLike

__all__ = ["Array", "ArrayLike", "Axes", "DTypeLike", "Extra", "IntOrSeq", "Modes",
           "Padding", "Scalar", "Shape", "FloatOrSeq"]

#: A NumPy or CuPy array, or what ``numpy.asarray`` takes.
ArrayLike = Any
#: A result: a NumPy array for NumPy inputs, a CuPy array for CuPy inputs.
Array = Any
#: One int for every axis, or one per axis.
IntOrSeq = Union[int, Sequence[int]]
#: One float for every axis, or one per axis.
FloatOrSeq = Union[float, Sequence[float]]
#: ``axes=``: one axis or several.
Axes = Union[int, Sequence[int]]
#: A shape.
Shape = Sequence[int]
#: ``padding=``: an int, one per axis, ``(before, after)`` pairs, ``"valid"`` or ``"same"``.
Padding = Union[int, str, Sequence[Union[int, Tuple[int, int]]]]
#: A fill value.
Scalar = Union[int, float, complex]
#: ``scipy.ndimage``'s ``mode=``: one name, or one per axis.
Modes = Union[str, Sequence[str]]
#: ``extra_keywords=`` of the generic ndimage filters.
Extra = Dict[str, Any]
