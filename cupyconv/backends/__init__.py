"""Backends: the :class:`~cupyconv.backends.base.Backend` interface and its two
implementations, ``numpy`` (CPU) and ``cuda`` (CuPy, or the CPU emulator), plus
the array-module-generic pieces they share (``arrays``, ``fft``, ``fft_conv``)."""
