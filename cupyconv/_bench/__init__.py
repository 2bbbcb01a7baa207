"""The benchmark suite of ``python -m cupyconv bench`` (part of the installed package).

:mod:`~cupyconv._bench.run` is the runner and its argument parser,
:mod:`~cupyconv._bench.problems` the named problem sets,
:mod:`~cupyconv._bench.peers` the libraries compared against (each used only
when importable), :mod:`~cupyconv._bench.timing` the timers and roofline
ceilings, :mod:`~cupyconv._bench.report` the JSON, markdown and plots.  The
developer benchmarks in ``benchmarks/`` of a checkout import these modules.
"""
