"""Warp shuffles, votes and reductions follow CUDA's semantics."""
import numpy as np

i32 = np.int32


def _expected_shuffles(n: int) -> np.ndarray:
    """Reference results of kernels/warp.cu:shuffle_modes for a block of n threads."""
    t = np.arange(n)
    lane, wbase = t % 32, t - t % 32
    v = 10 * t + 1

    def idx(src, w):
        return v[wbase + (lane & ~(w - 1)) + (src & (w - 1))]

    def up(d, w):
        return np.where((lane & (w - 1)) >= d, v[np.maximum(t - d, 0)], v)

    def down(d, w):
        ok = (lane & (w - 1)) + d < w
        return np.where(ok, v[np.minimum(t + d, n - 1)], v)

    def xor(m, w):
        j = lane ^ m
        ok = j <= (lane & ~(w - 1)) + w - 1
        return np.where(ok, v[np.minimum(wbase + j, n - 1)], v)

    ballot = np.zeros(n, np.int64)
    for warp in range(0, n, 32):
        bits = sum(1 << int(l) for l in range(32) if v[warp + l] % 3 == 0)
        ballot[warp:warp + 32] = bits
    rows = [idx((lane * 7) % 32, 32), up(3, 32), down(5, 32), xor(6, 32), down(2, 8),
            up(1, 16), xor(4, 4), idx(lane + 1, 16), ballot.astype(np.uint32).view(np.int32),
            np.ones(n), down(4, 16), np.full(n, 496), np.full(n, -1), t ^ 1]
    return np.array(rows, dtype=np.int64)


def test_shuffle_semantics(warp_module_any_schedule):
    n = 64
    out = np.zeros((14, n), dtype=np.int32)
    warp_module_any_schedule.get_function("shuffle_modes")(1, n, (out,))
    expected = _expected_shuffles(n)
    for row, name in enumerate(["shfl idx", "shfl up", "shfl down", "shfl xor", "down w8",
                                "up w16", "xor w4", "idx w16", "ballot", "any/all",
                                "partial-mask down", "reduce_add", "activemask", "xor double"]):
        np.testing.assert_array_equal(out[row], expected[row], err_msg=name)


def test_warp_reduction_matches_numpy_sum(warp_module_any_schedule):
    rng = np.random.default_rng(4)
    x = rng.integers(-100, 100, size=10007).astype(np.float32)  # exact float sums
    out = np.zeros(1, np.float32)
    warp_module_any_schedule.get_function("block_sum")(5, 256, (x, out, i32(x.size)))
    assert out[0] == x.sum(dtype=np.float64)


def test_ballot_count(warp_module):
    rng = np.random.default_rng(5)
    x = rng.standard_normal(1000).astype(np.float32)
    count = np.zeros(1, np.uint32)
    warp_module.get_function("count_positive")((1000 + 127) // 128, 128, (x, count, i32(x.size)))
    assert count[0] == np.count_nonzero(x > 0)
