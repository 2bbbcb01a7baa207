"""The README's API tour runs as printed (keeps the tour and the code in step)."""
from __future__ import annotations

import os
import re

import pytest

README = os.path.join(os.path.dirname(__file__), "..", "..", "README.md")
BLOCKS = re.findall(r"```python\n(.*?)```", open(README).read(), re.S)


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_block_runs(index, capsys):
    exec(compile(BLOCKS[index], f"README.md block {index}", "exec"), {})
    assert capsys.readouterr().out          # each block prints what it shows


def test_readme_commands_are_the_ci_ones():
    text = open(README).read()
    assert "python -m pip install -e . && python -m cupyconv demo" in text
    assert "bash scripts/test.sh" in text
    ci = open(os.path.join(os.path.dirname(README), ".ci", "run")).read()
    assert "bash scripts/test.sh" in ci
