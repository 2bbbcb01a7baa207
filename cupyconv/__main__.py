"""Command line: ``python -m cupyconv {info,demo,build,bench}``."""
from __future__ import annotations

import argparse
import sys

from ._cli import demo, info
from ._compile import main as build_main

__all__ = ["main"]


def _cmd_info(args):
    return info()


def _cmd_demo(args):
    return demo(size=args.size, backend=args.backend)


def _cmd_build(args):
    return build_main(args.extra)


def _cmd_bench(args):
    sys.path.insert(0, ".")
    try:
        from benchmarks.run import main as bench_main
    except ImportError as exc:
        print(f"the benchmark suite lives in benchmarks/ of the source tree ({exc})",
              file=sys.stderr)
        return 2
    argv = (["--suite", args.suite] if args.suite else []) + (["--quick"] if args.quick else [])
    argv += ["--out", args.out] if args.out else []
    argv += ["--backend", args.backend] if args.backend else []
    argv += ["--no-plots"] if args.no_plots else []
    return bench_main(argv)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m cupyconv", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("info", help="device, arch, cache and available backends")
    p.set_defaults(func=_cmd_info)
    p = sub.add_parser("demo", help="the main job: 4-D convolve and 3-D batched conv, checked")
    p.add_argument("--size", type=int, default=40, help="edge of the 4-D demo volume (>= 8)")
    p.add_argument("--backend", choices=("auto", "numpy", "cuda", "emulated"), default="auto")
    p.set_defaults(func=_cmd_demo)
    p = sub.add_parser("build", add_help=False,
                       help="ahead-of-time NVRTC compile of every kernel "
                            "(--arch sm_80,sm_90 --ranks 1-8; --help for all flags)")
    p.set_defaults(func=_cmd_build)
    p = sub.add_parser("bench", help="benchmark suite against the peers")
    p.add_argument("--suite")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", help="output folder (default docs/benchmarks)")
    p.add_argument("--backend", choices=("auto", "numpy", "cuda"),
                   help="default: cuda when a GPU is usable, else numpy")
    p.add_argument("--no-plots", action="store_true", help="JSON and markdown only")
    p.set_defaults(func=_cmd_bench)
    args, extra = parser.parse_known_args(argv)
    if extra and args.command != "build":      # build forwards its own flags
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.extra = extra
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
