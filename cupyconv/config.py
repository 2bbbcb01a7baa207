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
"""

autotune = False
workspace_limit = None
