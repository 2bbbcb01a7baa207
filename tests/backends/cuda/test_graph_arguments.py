"""A graph node's parameters follow its kernel's signature (``graphs.kernel_arguments``):
every struct the kernel takes (one for most kernels, two for the Winograd transforms: the
convolution's and the piece's), then one pointer per slot; and whether this CuPy can
graph at all (CuPy 13's ``Graph`` has no driver handles) is told apart and reported."""
from __future__ import annotations

import ctypes
import types

import numpy as np
import pytest

from cupyconv._kernels import program
from cupyconv._kernels.winograd_launch import _WithPiece
from cupyconv.backends.cuda import graphs


def _bytes_at(address, like):
    return ctypes.string_at(int(address), np.array(like).nbytes)


@pytest.mark.parametrize("structs", [0, 1, 3])
def test_arguments_hold_every_struct_then_the_pointers(structs):
    params = np.array((7, 2.5), dtype=[("a", np.int32), ("b", np.float64)])
    extra = [np.array(i + 10, np.int64) for i in range(structs)]
    fn = types.SimpleNamespace(structs=tuple(extra)) if structs else types.SimpleNamespace()
    launch = program.Launch(fn, (1,), (32,), 0, params, ("x", "w", "y"))
    argv, keep = graphs.kernel_arguments(launch, [0x5000, 0x6000, 0x7000])
    assert len(argv) == 1 + structs + 3
    assert _bytes_at(argv[0], params) == params.tobytes()
    for i, s in enumerate(extra):
        assert _bytes_at(argv[1 + i], s) == s.tobytes()
    assert [ctypes.c_uint64.from_address(int(a)).value for a in argv[1 + structs:]] == [
        0x5000, 0x6000, 0x7000]


def test_winograd_transform_passes_its_piece_as_the_second_struct():
    """The launch of a transform kernel (``_WithPiece``) calls the kernel with
    ``(params, piece, *pointers)``; a graph node gets the same order."""
    seen = []
    kernel = types.SimpleNamespace(ptr=0xC0DE)
    piece = np.array(3, np.int32)
    fn = _WithPiece(lambda grid, block, args, shared_mem=0: seen.append(args), piece)
    params = np.array(9, np.int32)
    fn((1,), (32,), (params, "p0", "p1"))
    launch = program.Launch(fn, (1,), (32,), 0, params, ("a", "b"))
    argv, _ = graphs.kernel_arguments(launch, [0x10, 0x20])
    called = seen[0]
    assert called[0] is params and called[1] is piece and called[2:] == ("p0", "p1")
    assert _bytes_at(argv[0], params) == params.tobytes()
    assert _bytes_at(argv[1], piece) == piece.tobytes()
    fn.kernel = types.SimpleNamespace(kernel=kernel)      # a RawKernel's CUfunction
    assert graphs.CupyGraphs.function_ptr(fn) == 0xC0DE


def test_a_cupy_graph_without_handles_is_graphs_off():
    class Graph14:
        graph = graphExec = property(lambda self: 0)
    cupy13 = types.SimpleNamespace(__version__="13.6.0", cuda=types.SimpleNamespace(
        Graph=type("Graph", (), {})))
    cupy14 = types.SimpleNamespace(__version__="14.2.0", cuda=types.SimpleNamespace(
        Graph=Graph14))
    why = graphs.graphs_off_reason(cupy13)
    assert "13.6.0" in why and "cudaGraph_t" in why
    assert graphs.graphs_off_reason(cupy14) == ""
