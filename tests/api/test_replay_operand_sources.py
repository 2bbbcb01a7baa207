"""Where a compiled call finds a recorded operand and its result again
(``api/replay_values.source`` and ``result_source``): one of the call's arrays, a view
of one (at its offset), a view of an earlier program's allocation; refused for an
operand inside two of the call's arrays (they overlap) and for a temporary the replay
cannot rebuild.  Each answer is checked against the arrays' memory as NumPy reports it
(``numpy.shares_memory`` and the byte offsets of the views)."""
from __future__ import annotations

import numpy as np
import pytest

from cupyconv.api.replay_values import result_source, source


def _offset(a, base):
    return a.__array_interface__["data"][0] - base.__array_interface__["data"][0]


@pytest.fixture
def arrays():
    return (np.arange(24.0).reshape(2, 3, 4), np.ones((5, 6), np.float32))


@pytest.mark.parametrize("pick", [
    lambda arr: arr[0],                     # the array itself
    lambda arr: arr[1],
    lambda arr: arr[0].reshape(6, 4),       # a view of it
    lambda arr: arr[1][2:],                 # a view at an offset
    lambda arr: arr[0][:, ::-1],            # reversed: starts past its first element
], ids=["first", "second", "reshaped", "offset view", "reversed view"])
def test_an_operand_in_one_of_the_calls_arrays_is_found_there(arrays, pick):
    a = pick(arrays)
    i = next(i for i, u in enumerate(arrays) if np.shares_memory(a, u))
    assert source(a, arrays, [], [], False) == ("arg", i, None, _offset(a, arrays[i]), None)


def test_an_absent_argument_holds_no_operand(arrays):
    """A call's argument that is ``None`` (an optional array not given) holds nothing,
    not even an array that owns its memory (whose ``base`` is ``None`` too)."""
    with_none = arrays + (None,)
    assert "temporary" in source(np.zeros(3), with_none, [], [], False)
    assert source(arrays[1][1:], with_none, [], [], False) == ("arg", 1, None, 6 * 4, None)


def test_an_operand_in_two_overlapping_arrays_is_refused():
    big = np.zeros(10)
    arrays = (big[2:6], big)
    for a in (arrays[0], arrays[0][1:]):
        assert "more than one" in source(a, arrays, [], [], False)
    assert source(big[7:], arrays, [], [], False) == ("arg", 1, None, 7 * 8, None)


def test_a_temporary_is_refused_and_a_programs_allocation_is_found(arrays):
    assert "temporary" in source(arrays[0] * 2, arrays, [], [], False)
    made = [[0, "y", np.zeros((4, 4)), None]]
    view = made[0][2][1:]
    assert source(view, arrays, made, [], False) == ("prev", 0, "y", 4 * 8, None)
    assert source(made[0][2], arrays, made, [], False) == ("prev", 0, "y", 0, None)


def test_the_result_is_found_among_the_allocations():
    made = [[0, "a", np.zeros(6), None], [1, "b", np.zeros(12), None]]
    assert result_source(made[0][2], made) == (0, "a", None)
    y = made[1][2].reshape(3, 4)                        # the whole buffer, reshaped
    assert result_source(y, made) == (1, "b", (0, (3, 4), None, y.dtype))
    y = made[1][2][2:8:2]                               # strided, at an offset
    assert result_source(y, made) == (1, "b", (16, (3,), (16,), y.dtype))
    assert isinstance(result_source(np.zeros(6), made), str)
