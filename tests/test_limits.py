"""The suite's child-process limits are derived from the work (tests/limits.py), and no
test carries a fixed one (issue 28: a fixed limit failed under load)."""
from __future__ import annotations

import pathlib
import re

import pytest

import limits

TESTS = pathlib.Path(__file__).resolve().parent
FIXED = re.compile(r"\b(timeout\s*=\s*\d|\.get\(\s*\d|\.wait\(\s*\d)")


def test_a_limit_grows_with_the_work_and_the_load(monkeypatch):
    monkeypatch.setattr(limits.os, "getloadavg", lambda: (0.5, 0, 0))
    assert limits.load_factor() == 1.0
    base = limits.child_limit(10, 2.0, 30.0)
    assert base == (30.0 + 20.0) * limits.SLACK
    assert limits.child_limit(20, 2.0, 30.0) > base
    monkeypatch.setattr(limits.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(limits.os, "getloadavg", lambda: (8.0, 0, 0))
    assert limits.load_factor() == 4.0
    assert limits.child_limit(10, 2.0, 30.0) == 4 * base


def test_negative_work_is_refused():
    with pytest.raises(ValueError):
        limits.child_limit(-1, 1.0)


def test_no_test_carries_a_fixed_time_limit():
    found = [f"{p.relative_to(TESTS)}:{n}: {line.strip()}"
             for p in sorted(TESTS.rglob("*.py")) if p.name != pathlib.Path(__file__).name
             for n, line in enumerate(p.read_text().splitlines(), 1) if FIXED.search(line)]
    assert found == [], "derive these from the work (tests/limits.py):\n" + "\n".join(found)
