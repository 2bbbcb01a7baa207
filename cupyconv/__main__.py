"""Command line: ``python -m cupyconv {info,demo,build,sass,bench}``."""
from __future__ import annotations

import argparse
import sys

from ._cli import demo, info
from ._compile import main as build_main
from ._compile.sass_report import main as sass_main

__all__ = ["main"]


def _cmd_info(args):
    return info()


def _cmd_demo(args):
    return demo(size=args.size, backend=args.backend)


def _cmd_build(args):
    return build_main(args.extra)


def _cmd_sass(args):
    return sass_main(args.extra)


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
    argv += ["--docs"] if args.docs else []
    argv += ["--backend", args.backend] if args.backend else []
    argv += ["--no-plots"] if args.no_plots else []
    return bench_main(argv)


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m cupyconv",
        description="The cupyconv command line. Run python -m cupyconv COMMAND --help for the "
                    "flags of one command.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("info", help="backends, CuPy, CUDA driver, devices, NVRTC, where the "
                                    "kernels come from, and what to install when one is missing")
    p.set_defaults(func=_cmd_info)
    p = sub.add_parser("demo", help="the main job: 4-D convolve and 3-D batched conv, checked")
    p.add_argument("--size", type=int, default=40, help="edge of the 4-D demo volume (>= 8)")
    p.add_argument("--backend", choices=("auto", "numpy", "cuda", "emulated"), default="auto")
    p.set_defaults(func=_cmd_demo)
    p = sub.add_parser("build", add_help=False,
                       help="ahead-of-time NVRTC compile of every kernel "
                            "(--arch sm_80,sm_90 --ranks 1-8; --help for all flags)")
    p.set_defaults(func=_cmd_build)
    p = sub.add_parser("sass", add_help=False,
                       help="hot loops, instruction mix and occupancy of the kernels' machine code "
                            "(--arch sm_90 --ranks 3; needs the [dev] extra; --help for all flags)")
    p.set_defaults(func=_cmd_sass)
    p = sub.add_parser("bench", help="benchmark suite against the peers (shows the case it is on)")
    p.add_argument("--suite")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", help="output folder (default: cupyconv-bench/ in the current directory)")
    p.add_argument("--docs", action="store_true",
                   help="write into docs/benchmarks/ of the source tree (the tracked results)")
    p.add_argument("--backend", choices=("auto", "numpy", "cuda"),
                   help="default: cuda when a GPU is usable, else numpy")
    p.add_argument("--no-plots", action="store_true", help="JSON and markdown only")
    p.set_defaults(func=_cmd_bench)
    args, extra = parser.parse_known_args(argv)
    if extra and args.command not in ("build", "sass"):   # they forward their own flags
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.extra = extra
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
