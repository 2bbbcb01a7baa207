"""Process-wide settings.

Attributes
----------
autotune : bool
    When True, ``method="auto"`` times every candidate algorithm the first
    time it sees a problem and reuses the winner (cached per problem key,
    bounded).  Default False: the cost model decides without running.
workspace_limit : int or None
    Default cap, in bytes, on the extra memory an algorithm may allocate
    (the ``gemm`` column buffer, FFT spectra).  ``None`` means no cap on
    the CPU and "what the device has free" on the GPU.
precision : {"highest", "tf32"}
    Default of every function's ``precision=``: ``"highest"`` (float32 data computed
    with float32 products and sums) or ``"tf32"`` (float32 operands rounded to TF32 --
    10 mantissa bits, round to nearest, ties away, as ``cvt.rna.tf32.f32`` -- then
    products and sums in float32: the numerics of TF32 tensor cores, as PyTorch's
    ``allow_tf32``).  Off by default.
winograd_max_error_growth : float or None
    The largest error growth (an RMS model relative to direct summation's,
    :func:`cupyconv.core.winograd.error_growth`, multiplied over the axes) a
    ``winograd`` tile may have.  ``None``: 10 for float32/float64/complex, 2 for
    float16.  ``0`` turns ``winograd`` off (``auto`` never considers it and an
    explicit ``method="winograd"`` is refused with this reason).
compiled_calls : bool
    When True (default), a repeated call of a public function with the same key (the
    arrays' shapes, strides, dtypes, alignment and device, every argument, these
    settings and the backend) replays the launch programs its first call ran, without
    the dispatcher (``cupyconv.api.compiled``; docs/architecture.md).  False: every
    call takes the normal path (what ``benchmarks.host_path`` compares against).
prebuilt_launches : bool
    When True, a compiled call on CuPy launches through ``cupy.cuda.driver.launchKernel``
    with its parameter struct and argument array built once
    (``cupyconv.backends.cuda.prebuilt_launch``) instead of ``RawKernel.__call__``, which
    marshals every argument per call.  Default False until a device check has run it.
"""

autotune = False
workspace_limit = None
winograd_max_error_growth = None
precision = "highest"
compiled_calls = True
prebuilt_launches = False
