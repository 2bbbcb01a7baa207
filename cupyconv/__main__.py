"""Command line: ``python -m cupyconv {info,demo,build,bench}``."""
from __future__ import annotations

import argparse
import sys

__all__ = ["main"]


def _cmd_info(args):
    from ._cli import info
    return info()


def _cmd_demo(args):
    from ._cli import demo
    return demo(size=args.size, backend=args.backend)


def _cmd_build(args):
    from ._compile import main as build_main
    argv = []
    if args.arch:
        argv += ["--arch", args.arch]
    if args.ranks:
        argv += ["--ranks", args.ranks]
    return build_main(argv)


def _cmd_bench(args):
    sys.path.insert(0, ".")
    try:
        from benchmarks.run import main as bench_main
    except ImportError as exc:
        print(f"the benchmark suite lives in benchmarks/ of the source tree ({exc})",
              file=sys.stderr)
        return 2
    argv = (["--suite", args.suite] if args.suite else []) + (["--quick"] if args.quick else [])
    return bench_main(argv + (["--out", args.out] if args.out else []))


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m cupyconv", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("info", help="device, arch, cache and available backends")
    p.set_defaults(func=_cmd_info)
    p = sub.add_parser("demo", help="the main job: 4-D convolve and 3-D batched conv, checked")
    p.add_argument("--size", type=int, default=40, help="edge of the 4-D demo volume (>= 8)")
    p.add_argument("--backend", choices=("auto", "numpy", "cuda", "emulated"), default="auto")
    p.set_defaults(func=_cmd_demo)
    p = sub.add_parser("build", help="ahead-of-time NVRTC compile of every kernel")
    p.add_argument("--arch", help="comma-separated, e.g. sm_80,sm_90")
    p.add_argument("--ranks", help="e.g. 1-8 or 1,2,3")
    p.set_defaults(func=_cmd_build)
    p = sub.add_parser("bench", help="benchmark suite against the peers")
    p.add_argument("--suite")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", help="output folder (default docs/benchmarks)")
    p.set_defaults(func=_cmd_bench)
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
