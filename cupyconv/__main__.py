"""Command line: ``python -m cupyconv {info,demo,build,sass,bench}`` and ``--version``."""
from __future__ import annotations

import argparse
import os
import sys

from ._cli import demo, info
from ._compile import main as build_main
from ._compile.sass_report import main as sass_main
from ._version import __version__

__all__ = ["main"]


def _cmd_info(args):
    return info(kernels=getattr(args, "kernels", False))


def _cmd_demo(args):
    return demo(size=args.size, backend=args.backend)


def _cmd_build(args):
    return build_main(args.extra)


def _cmd_sass(args):
    return sass_main(args.extra)


def _cmd_bench(args):
    from ._bench.run import main as bench_main     # the suite is part of the package
    return bench_main(args.extra, prog=f"{_prog()} bench")


def _prog():
    """``cupyconv`` when run as the console script, else ``python -m cupyconv``."""
    name = os.path.basename(sys.argv[0] or "")
    return "cupyconv" if name in ("cupyconv", "cupyconv.exe") else "python -m cupyconv"


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog=_prog(),
        description="The cupyconv command line. Run cupyconv COMMAND --help for the "
                    "flags of one command.")
    parser.add_argument("--version", action="version", version=f"cupyconv {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("info", help="backends, CuPy, CUDA driver, devices, NVRTC, where the "
                                    "kernels come from, and what to install when one is missing")
    p.add_argument("--kernels", action="store_true",
                   help="print the hardware-evidence ledger: every kernel configuration, "
                        "launch path and library call, verified on hardware or emulator only")
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
    p = sub.add_parser("bench", add_help=False,
                       help="benchmark suite against the peers (--suite NAME --quick --cases "
                            "TEXT --repeat N --peers A,B; --help for all flags and the suites)")
    p.set_defaults(func=_cmd_bench)
    args, extra = parser.parse_known_args(argv)
    if extra and args.command not in ("build", "sass", "bench"):   # they parse their own flags
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.extra = extra
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
