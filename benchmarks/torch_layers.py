"""N-D convolution layers in PyTorch: ``cupyconv.torch`` against its peers.

Times one layer's forward pass and forward + backward (gradients of the input, the
weights and the bias) for 4-D and 5-D layers (and a 3-D one, against ``nn.Conv3d``):

``cupyconv.torch``
    :func:`cupyconv.torch.conv` on tensors (the custom operator and autograd).
``cupyconv direct``
    :func:`cupyconv.conv`, ``conv_grad_input``, ``conv_grad_weight`` and
    ``conv_grad_bias`` called on the tensors' memory (NumPy views / CuPy arrays,
    made on each call, as the adapter must) by hand: the adapter's own cost is the
    first row over this one.
``torchnd``
    ``torchnd.conv_nd`` (recursive sums of ``conv3d``), when installed.
``unfoldNd``
    ``unfoldNd.unfoldNd`` (im2col) and one matmul, when installed; unfoldNd 0.2.3
    builds its unfold from torch's ``conv1d``-``conv3d`` and raises above three
    spatial axes, so it has a row on the 3-D case only.
``nn.Conv3d``
    ``torch.nn.functional.conv3d`` on the 3-D case.

Every row computes the same output and gradients from the same tensors: one
grad_output per case (made once, outside the timing), and the ``.grad`` of the
operands emptied before every call in every row, as ``zero_grad()`` leaves them.

torchnd (GPL) and unfoldNd are optional peers, imported if present and never
dependencies: ``pip install --target DIR torchnd unfoldnd einops`` and put ``DIR`` on
``PYTHONPATH`` for the run.  Each round times every implementation once, in turn
in a new seeded random order (alternating, so load drifts hit all alike, and each
follows every other about as often); the table has the medians over the rounds
and the ratios of the peers' times to ``cupyconv.torch``'s: the ratio of the medians,
and the median and quartiles of the ratios within each round (paired: a peer and
``cupyconv.torch`` timed in the same round, under the same load); the adapter's cost is
given from the medians and from the fastest rounds (the least disturbed by other load).

Usage::

    python benchmarks/torch_layers.py [--device cpu|cuda] [--rounds 5] [--threads 1]
        [--dtype float32 float64] [--clock wall|cpu] [--quick] [--cases TEXT] [--overhead]

``--threads`` is every implementation's: torch's intra-op threads, the BLAS's and
cupyconv's CPU lanes (``cupyconv.config.cpu_threads``).

``--overhead`` times ``cupyconv.torch`` and the direct calls only, on a tiny layer and on
the cases, for the adapter's own cost in microseconds and in percent of the direct calls.
``--overhead --stubbed`` times the code around the convolutions only: ``cupyconv.conv``
and its three gradients are replaced by stubs that return a copy of their result (the
same stubs in every row), so the costs are those of the Python and torch work around
them, with little of the scatter of the convolutions' own time.

Prints a Markdown table; nothing is written to disk.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import itertools
import os
import random
import statistics
import sys
import time

if __package__ in (None, ""):    # run as a script: this checkout, after PYTHONPATH's entries
    sys.path.insert(1 + len([p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]),
                    os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import cupyconv  # noqa: E402
import cupyconv.torch as ct  # noqa: E402

#: (name, N, C_in, C_out, spatial, kernel, stride, padding)
CASES = [
    ("3-D 16^3, 8->8, k3", 2, 8, 8, (16,) * 3, 3, 1, 1),
    ("4-D 10^4, 4->8, k3", 2, 4, 8, (10,) * 4, 3, 1, 1),
    ("4-D 12^4, 8->8, k3", 1, 8, 8, (12,) * 4, 3, 1, 1),
    ("4-D 14^4, 4->4, k3 s2", 2, 4, 4, (14,) * 4, 3, 2, 1),
    ("5-D 7^5, 4->4, k3", 1, 4, 4, (7,) * 5, 3, 1, 1),
]
QUICK = [CASES[1], CASES[4]]
#: A layer whose convolution costs about as much as the calls around it: ``--overhead``
#: times it many calls per sample, for the adapter's fixed cost per call in microseconds.
TINY = ("3-D 4^3, 2->2, k3", 1, 2, 2, (4,) * 3, 3, 1, 1)


def _optional(name):
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def _sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def _arrays(*tensors):
    """The tensors' memory as NumPy or CuPy arrays (no copies), for the direct calls."""
    if tensors[0].is_cuda:
        import cupy
        return cupy, [cupy.from_dlpack(t.detach()) for t in tensors]
    import numpy
    return numpy, [t.detach().numpy() for t in tensors]


def _least_autograd(geo):
    """A bare :class:`torch.autograd.Function` around the direct calls (CPU): what any
    autograd wrapper of them costs at least (no checks, no custom operator, no double
    backward)."""
    class Least(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w, b):
            ctx.save_for_backward(x, w)
            xa, wa, ba = (t.numpy() for t in (x, w, b))
            return torch.from_numpy(cupyconv.conv(xa, wa, ba, **geo))

        @staticmethod
        def backward(ctx, dy):
            x, w = ctx.saved_tensors
            xa, wa, dya = x.numpy(), w.numpy(), dy.numpy()
            return (torch.from_numpy(cupyconv.conv_grad_input(dya, wa, xa.shape, **geo)),
                    torch.from_numpy(cupyconv.conv_grad_weight(xa, dya, wa.shape, **geo)),
                    torch.from_numpy(cupyconv.conv_grad_bias(dya)))

    return _autograd_call(Least.apply)


def _autograd_call(fn):
    """``run(x, w, b, dy)`` of a differentiable ``fn(x, w, b)``: the output and, given
    ``dy``, the gradients for that grad_output, as a training step makes them
    (``backward`` into ``.grad``, which :func:`measure` empties before every call, as
    ``zero_grad()`` does: nothing accumulates)."""
    def run(x, w, b, dy):
        y = fn(x, w, b)
        if dy is None:
            return (y,)
        y.backward(dy)
        return y, x.grad, w.grad, b.grad
    return run


def implementations(r, stride, padding, groups=1):
    """``{name: fn(x, w, b, dy)}`` of every implementation available: each returns the
    output and, given the grad_output ``dy`` (the same tensor for every implementation),
    the gradients of ``x``, ``w`` and ``b``."""
    geo = dict(stride=stride, padding=padding)

    def direct(x, w, b, dy):
        xp, (xa, wa, ba) = _arrays(x, w, b)
        y = cupyconv.conv(xa, wa, ba, **geo)
        if dy is None:
            return (y,)
        _, (dya,) = _arrays(dy)
        return (y, cupyconv.conv_grad_input(dya, wa, xa.shape, **geo),
                cupyconv.conv_grad_weight(xa, dya, wa.shape, **geo),
                cupyconv.conv_grad_bias(dya))

    impls = {"cupyconv.torch": _autograd_call(lambda x, w, b: ct.conv(x, w, b, **geo)),
             "cupyconv direct": direct}
    if r == 3:
        impls["nn.Conv3d"] = _autograd_call(
            lambda x, w, b: torch.nn.functional.conv3d(x, w, b, **geo))
    torchnd = _optional("torchnd")
    if torchnd is not None:
        spatial = tuple(range(2, 2 + r))
        impls["torchnd"] = _autograd_call(lambda x, w, b: torchnd.conv_nd(
            x, w, dim=spatial, stride=stride, padding=padding, groups=groups)
            + b.reshape((1, -1) + (1,) * r))
    unfold = _optional("unfoldNd")
    if unfold is not None and groups == 1 and r <= 3:     # unfoldNd stops at 3-D
        def im2col(x, w, b):
            cols = unfold.unfoldNd(x, w.shape[2:], padding=padding, stride=stride)
            y = w.reshape(w.shape[0], -1) @ cols + b[:, None]
            out = [(s + 2 * padding - k) // stride + 1
                   for s, k in zip(x.shape[2:], w.shape[2:])]
            return y.reshape(x.shape[0], w.shape[0], *out)
        impls["unfoldNd"] = _autograd_call(im2col)
    return impls


def measure(case, device, rounds, backward, dtype=torch.float32, clock=time.perf_counter,
            repeat=1, only=None, samples=None):
    """``({implementation: median seconds per call}, fastest ours / fastest direct)``
    over ``rounds`` rounds, each timing ``repeat`` calls of every implementation (of
    those named in ``only``, when given); each round's seconds per call appended to
    ``samples[implementation]`` when a dict is given (:func:`paired_ratios`).

    Every implementation computes the same things from the same tensors: the output
    and, with ``backward``, the three gradients for one grad_output made once per case
    (no implementation allocates or fills its own).  The gradients in ``.grad`` are
    emptied before every call, in every row alike, so each backward pass stores them
    as a training step after ``zero_grad()`` does, and none adds to the last call's."""
    name, n, cin, cout, spatial, k, stride, padding = case
    gen = torch.Generator().manual_seed(0)
    r = len(spatial)

    def make(shape):
        return torch.randn(shape, generator=gen, dtype=dtype).to(device).requires_grad_()
    x, w, b = make((n, cin) + spatial), make((cout, cin) + (k,) * r), make((cout,))
    dy = None
    if backward:
        with torch.no_grad():
            shape = ct.conv(x, w, b, stride=stride, padding=padding).shape
        dy = torch.randn(shape, generator=gen, dtype=dtype).to(device)
    impls = implementations(r, stride, padding)
    if only is not None:
        impls = {key: fn for key, fn in impls.items() if key in only}
        if "least autograd" in only:
            impls["least autograd"] = _least_autograd(dict(stride=stride, padding=padding))
    samples = {} if samples is None else samples
    for key in impls:
        samples[key] = []
    for fn in impls.values():              # warm-up: compiled calls, caches, threads
        fn(x, w, b, dy)
    _sync(device)
    order = random.Random(0)
    for _ in range(rounds):
        # a new order each round: the implementation that runs after a peer's large
        # buffers are freed starts cold (unfoldNd's cost the next call 0.5-1.5 ms)
        keys = list(impls)
        order.shuffle(keys)
        for key in keys:
            fn = impls[key]
            _sync(device)
            t0 = clock()
            for _ in range(repeat):
                x.grad = w.grad = b.grad = None
                fn(x, w, b, dy)
            _sync(device)
            samples[key].append((clock() - t0) / repeat)
    return ({key: statistics.median(v) for key, v in samples.items()},
            min(samples["cupyconv.torch"]) / min(samples["cupyconv direct"]))


def paired_ratios(samples, peer, ours="cupyconv.torch"):
    """``(first quartile, median, third quartile)`` of ``peer``'s time over ``ours`` in
    each round of :func:`measure`'s ``samples`` (both timed in the same round)."""
    ratios = [a / b for a, b in zip(samples[peer], samples[ours], strict=True)]
    if len(ratios) < 2:
        return (ratios[0],) * 3
    return tuple(statistics.quantiles(ratios, n=4, method="inclusive"))


def _quartiles(q):
    return f"{q[1]:.2f}x, {q[0]:.2f}-{q[2]:.2f}"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch's, the BLAS's and cupyconv's threads (CPU)")
    parser.add_argument("--quick", action="store_true", help="two cases only")
    parser.add_argument("--cases", default=None,
                        help="only the cases whose name contains this text")
    parser.add_argument("--overhead", action="store_true",
                        help="instead: the adapter's cost over the direct calls only, on "
                             "a tiny layer (its fixed cost per call) and on the cases")
    parser.add_argument("--stubbed", action="store_true",
                        help="with --overhead: cupyconv's convolutions replaced by stubs "
                             "that return a copy of their result (the cost around them)")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="cpu: the process's CPU time (time.process_time), for a "
                             "machine shared with other work (CPU runs only)")
    parser.add_argument("--dtype", choices=("float32", "float64"), nargs="+",
                        default=["float32", "float64"])
    args = parser.parse_args(argv)
    from threadpoolctl import threadpool_limits
    torch.set_num_threads(args.threads)
    peers = [p for p in ("torchnd", "unfoldNd") if _optional(p) is not None]
    if args.clock == "cpu" and args.device == "cuda":
        parser.error("--clock cpu times CPU runs only")
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    cases = [c for c in (QUICK if args.quick else CASES)
             if args.cases is None or args.cases in c[0]]
    print(f"torch {torch.__version__}, {args.device}, {args.threads} thread(s), "
          f"{args.rounds} rounds, {args.clock} clock; peers present: {', '.join(peers) or 'none'}\n")
    head = ("| case | dtype | pass | cupyconv.torch ms | direct ms | adapter cost (median / "
            "fastest) | peer ms "
            "(peer / cupyconv.torch: of the medians; per round, median and quartiles) |")
    with threadpool_limits(args.threads), cupyconv.config.cpu_threads_limit(args.threads):
        if args.overhead:
            if not args.stubbed:
                return _overhead(args, clock)
            with _stubbed():
                return _overhead(args, clock)
        print(head)
        print("|" + "---|" * 7)
        for case, dtype, backward in itertools.product(cases, args.dtype, (False, True)):
            rounds = {}
            t, best = measure(case, args.device, args.rounds, backward,
                              getattr(torch, dtype), clock, samples=rounds)
            ours = t.pop("cupyconv.torch")
            direct = t.pop("cupyconv direct")
            peers = ", ".join(f"{k} {v * 1e3:.1f} ({v / ours:.2f}x; per round "
                              + _quartiles(paired_ratios(rounds, k)) + ")"
                              for k, v in t.items()) or "-"
            print(f"| {case[0]} | {dtype} | {'fwd+bwd' if backward else 'fwd'} | "
                  f"{ours * 1e3:.1f} | {direct * 1e3:.1f} | "
                  f"{(ours / direct - 1) * 100:+.1f}% / {(best - 1) * 100:+.1f}% | {peers} |",
                  flush=True)
    return 0


#: The ``cupyconv`` functions that ``--stubbed`` replaces.
STUBBED = ("conv", "conv_grad_input", "conv_grad_weight", "conv_grad_bias")


def _stub(fn):
    """``fn`` computing each distinct call (operand shapes and dtypes, other arguments)
    once, then returning a copy of that result."""
    seen = {}

    def stub(*args, **kwargs):
        key = (tuple((a.shape, a.dtype) if hasattr(a, "dtype") else a for a in args),
               tuple(sorted(kwargs.items())))
        hit = seen.get(key)
        if hit is None:
            hit = seen[key] = fn(*args, **kwargs)
        return hit.copy()
    return stub


@contextlib.contextmanager
def _stubbed():
    """The functions of :data:`STUBBED` replaced by :func:`_stub` in ``cupyconv``."""
    real = {name: getattr(cupyconv, name) for name in STUBBED}
    try:
        for name, fn in real.items():
            setattr(cupyconv, name, _stub(fn))
        yield
    finally:
        for name, fn in real.items():
            setattr(cupyconv, name, fn)


def _overhead(args, clock):
    """Print the adapter's cost table: ``cupyconv.torch`` against the direct calls, and
    the least an autograd wrapper of them costs (:func:`_least_autograd`, CPU only), on
    :data:`TINY` (200 calls per sample: the fixed cost per call) and on each case
    selected (``--cases``, ``--quick``; 3 calls per sample), alternating in each round."""
    print("| case | dtype | pass | cupyconv.torch us | direct us | adapter cost us | "
          "adapter cost % (median / fastest) | least autograd wrapper, cost us |")
    print("|" + "---|" * 8)
    cases = [TINY] + ([c for c in (QUICK if args.quick else CASES)
                       if args.cases is None or args.cases in c[0]])
    only = ("cupyconv.torch", "cupyconv direct") + (
        ("least autograd",) if args.device == "cpu" else ())
    for case, dtype, backward in itertools.product(cases, args.dtype, (False, True)):
        t, best = measure(case, args.device, args.rounds, backward, getattr(torch, dtype),
                          clock, repeat=200 if case is TINY else 3, only=only)
        ours, direct = t["cupyconv.torch"] * 1e6, t["cupyconv direct"] * 1e6
        least = t.get("least autograd")
        least = "-" if least is None else f"{least * 1e6 - direct:+.0f}"
        print(f"| {case[0]} | {dtype} | {'fwd+bwd' if backward else 'fwd'} | {ours:.0f} | "
              f"{direct:.0f} | {ours - direct:+.0f} | "
              f"{(ours / direct - 1) * 100:+.1f}% / {(best - 1) * 100:+.1f}% | {least} |",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
