"""Every public function and method carries complete annotations (mypy checks them in
the test command, scripts/test.sh), and the package says so to type checkers
(``py.typed``, PEP 561)."""
from __future__ import annotations

import importlib
import inspect
import os

import pytest

import cupyconv

MODULES = ["cupyconv", "cupyconv.ndimage", "cupyconv.grad", "cupyconv.dask"]
#: Public methods of the exported classes (their other members are data or dunder).
METHODS = {"ConvPlan": ["__init__", "__call__", "explain"],
           "ConvOperator": ["__init__", "from_conv", "matvec", "rmatvec", "aslinearoperator",
                            "dot", "matmat", "rmatmat", "__matmul__", "__rmatmul__"]}


def _public_callables():
    for name in MODULES:
        if name == "cupyconv.dask":
            pytest.importorskip("dask")
        module = importlib.import_module(name)
        for attr in module.__all__:
            obj = getattr(module, attr)
            if inspect.isfunction(obj):
                yield f"{name}.{attr}", obj
            elif inspect.isclass(obj) and attr in METHODS:
                for method in METHODS[attr]:
                    yield f"{name}.{attr}.{method}", getattr(obj, method)


def _missing(fn):
    sig = inspect.signature(inspect.unwrap(fn))
    missing = [p.name for p in sig.parameters.values()
               if p.name not in ("self", "cls") and p.annotation is inspect.Parameter.empty]
    if sig.return_annotation is inspect.Signature.empty:
        missing.append("return")
    return missing


def test_every_public_function_is_fully_annotated():
    found = dict(_public_callables())
    assert len(found) >= 50, sorted(found)               # the walk reached every module
    incomplete = {name: m for name, fn in found.items() if (m := _missing(fn))}
    assert not incomplete, incomplete


def test_properties_of_a_plan_are_annotated():
    for name in ("frozen", "flops", "bytes_moved"):
        fget = getattr(cupyconv.ConvPlan, name).fget
        assert inspect.signature(fget).return_annotation is not inspect.Signature.empty, name


def test_the_package_is_marked_typed():
    assert os.path.isfile(os.path.join(os.path.dirname(cupyconv.__file__), "py.typed"))


def test_precision_is_documented_wherever_it_is_accepted():
    """A function taking ``precision=`` documents it (its own docstring, the class
    docstring for a constructor, or a pointer to the function that explains it)."""
    takers = {}
    for name, fn in _public_callables():
        if "precision" in inspect.signature(inspect.unwrap(fn)).parameters:
            owner = getattr(cupyconv, name.split(".")[-2], None) if name.endswith(
                "__init__") else None
            takers[name] = (inspect.getdoc(fn) or "") + (inspect.getdoc(owner) or "")
    assert len(takers) >= 9, sorted(takers)
    undocumented = [n for n, doc in takers.items() if "precision" not in doc]
    assert not undocumented, undocumented
