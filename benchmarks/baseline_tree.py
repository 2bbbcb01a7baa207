"""A git commit's package in a temporary directory: the baseline side of the benchmarks
that time our own previous commit in the same run (``--baseline REF``)."""
from __future__ import annotations

import os
import subprocess
import tarfile
import tempfile

__all__ = ["baseline_tree"]


def baseline_tree(ref, prefix="cupyconv-baseline-"):
    """``(directory, short commit)``: git ``ref``'s ``cupyconv`` and ``cuda_src`` extracted
    into a new temporary directory (the caller removes it), for a subprocess run with
    ``PYTHONPATH`` set to it; the repository is the one holding this file."""
    here = os.path.dirname(os.path.abspath(__file__))
    root = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=here,
                          capture_output=True, text=True, check=True).stdout.strip()
    commit = subprocess.run(["git", "rev-parse", "--short", ref], cwd=root,
                            capture_output=True, text=True, check=True).stdout.strip()
    tree = tempfile.mkdtemp(prefix=prefix)
    archive = subprocess.run(["git", "archive", ref, "cupyconv", "cuda_src"], cwd=root,
                             capture_output=True, check=True).stdout
    with tempfile.TemporaryFile() as fh:
        fh.write(archive)
        fh.seek(0)
        with tarfile.open(fileobj=fh) as tar:
            tar.extractall(tree, filter="data")
    return tree, commit
