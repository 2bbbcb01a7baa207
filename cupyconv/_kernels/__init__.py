"""CUDA kernel table, parameter packing and launchers (see docs/kernels.md)."""
from . import registry
from .launch import (addressable, can_implement_direct, can_implement_implicit_gemm,
                     can_implement_vol2col, run_col2vol, run_direct, run_implicit_gemm_fprop,
                     run_vol2col)
from .params import conv_params_dtype, pack_conv_params

__all__ = [
    "registry", "addressable", "conv_params_dtype", "pack_conv_params", "can_implement_vol2col",
    "can_implement_implicit_gemm", "can_implement_direct", "run_vol2col", "run_col2vol",
    "run_implicit_gemm_fprop", "run_direct",
]
