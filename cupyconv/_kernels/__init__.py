"""CUDA kernel table, parameter packing and launchers (see docs/kernels.md).

The names below load their modules on first access (PEP 562), so importing one
light module of this package (``program``, ``addressing``: the NumPy path uses
them) does not load the kernel table and the launchers.
"""
import importlib

#: public name -> the submodule that defines it
_HOMES = {
    "registry": None,
    "addressable": "launch", "can_implement_direct": "launch",
    "can_implement_implicit_gemm": "launch", "can_implement_vol2col": "launch",
    "run_col2vol": "launch", "run_direct": "launch", "run_implicit_gemm_fprop": "launch",
    "run_vol2col": "launch",
    "conv_params_dtype": "params", "pack_conv_params": "params",
}

__all__ = [
    "registry", "addressable", "conv_params_dtype", "pack_conv_params", "can_implement_vol2col",
    "can_implement_implicit_gemm", "can_implement_direct", "run_vol2col", "run_col2vol",
    "run_implicit_gemm_fprop", "run_direct",
]


def __getattr__(name):
    """A re-exported name of :data:`_HOMES`, its submodule imported on first access."""
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    home = _HOMES[name]
    module = importlib.import_module(f"{__name__}.{home or name}")
    return module if home is None else getattr(module, name)
