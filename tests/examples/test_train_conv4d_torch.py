"""examples/train_conv4d_torch.py: the loss falls under torch.optim.Adam, eagerly and
under torch.compile, and the command line prints a falling loss."""
from __future__ import annotations

import pathlib
import re
import runpy
import types

import pytest

torch = pytest.importorskip("torch")

EXAMPLE = (pathlib.Path(__file__).resolve().parents[2] / "examples"
           / "train_conv4d_torch.py")


@pytest.fixture(scope="module")
def ex():
    """The example's functions (run as a module, not as ``__main__``)."""
    return types.SimpleNamespace(**runpy.run_path(str(EXAMPLE), run_name="example"))


def test_training_loss_falls(ex):
    # Size 4, batch 2, 15 steps: over seeds 0..9 the ratio last/first lay in
    # [0.09, 0.15], so 0.3 leaves a 2x margin and still demands real progress
    # (the target has unit variance: predicting zero scores about 1).
    losses = ex.train(steps=15, size=4, batch=2, seed=3)
    assert len(losses) == 15 and all(map(torch.isfinite, torch.tensor(losses)))
    assert losses[-1] < 0.3 * losses[0], losses


def test_compiled_training_matches_eager(ex):
    eager = ex.train(steps=3, size=4, batch=1, seed=1)
    compiled = ex.train(steps=3, size=4, batch=1, seed=1, compile=True)
    assert compiled == pytest.approx(eager, rel=1e-12)


def test_main_prints_a_falling_loss(ex, capsys):
    rc = ex.main(["--steps", "6", "--size", "4", "--batch", "1", "--seed", "2"])
    out = capsys.readouterr().out
    rows = re.findall(r"^\s*(\d+)\s+([0-9.eE+-]+)\s*$", out, flags=re.MULTILINE)
    assert [int(s) for s, _ in rows] == list(range(6)), out
    losses = [float(v) for _, v in rows]
    assert losses[-1] < losses[0], out
    assert rc == 0 and "->" in out
