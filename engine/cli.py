"""The ``chaosflow`` command line.

Exit codes: 0 success, 1 the workflow failed, 2 invalid input (with one ``FILE: PATH: message``
line per problem and no traceback).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from engine.errors import ChaosflowError, InputError, ValidationFailed
from engine.runner import EXIT_INVALID, RunOptions

DESCRIPTION = """chaosflow — a Kubernetes-native workflow engine for chaos and simulation experiments.

Runs Workflow YAML (chaosflow.io/v1alpha1, or Chaos Mesh's chaos-mesh.org/v1alpha1) on the
embedded simulated cluster with a virtual clock, or against real clusters."""


def _add_run_output(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-o",
        "--output",
        choices=["text", "json", "yaml"],
        default="text",
        help="text: live progress and the final node tree; json/yaml: the final Workflow object",
    )
    p.add_argument("--quiet", action="store_true", help="no live progress lines")
    p.add_argument("--log-level", default="warn", choices=["debug", "info", "warn", "error"])
    p.add_argument("--log-format", default="text", choices=["text", "json"], help="structured log format")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="chaosflow", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser(
        "validate",
        help="check Workflow files without running them",
        description="Check Workflow files: schema, names, references, cycles, reachability, durations, "
        "expressions. Prints one line per problem as FILE: PATH: message; exits 2 when any is found.",
    )
    p.add_argument("files", nargs="+", metavar="FILE")

    p = sub.add_parser(
        "run",
        help="run a Workflow to completion (simulated cluster + virtual clock by default)",
        description="Run the Workflow(s) in FILE to completion on the embedded simulated cluster with a "
        "virtual clock: an hour of chaos takes a moment, and the same --seed gives the same run. "
        "Exit 0 when every workflow Succeeds, 1 when one Fails, 2 on invalid input. Times in the "
        "output are RFC 3339 on the run's clock; the virtual clock starts at 2026-01-01T00:00:00Z.",
    )
    p.add_argument("file", metavar="FILE")
    p.add_argument(
        "--seed", type=int, default=None, help="seed of the random source (default: spec.seed or 0)"
    )
    p.add_argument(
        "--state", metavar="PATH", help="SQLite file for the run's state (enables `chaosflow resume`)"
    )
    p.add_argument("--real-time", action="store_true", help="use the wall clock instead of the virtual clock")
    p.add_argument(
        "--checkpoint",
        type=float,
        default=0.25,
        metavar="SECONDS",
        help="with --state: write a checkpoint at most every SECONDS of wall time (0 = every engine tick)",
    )
    p.add_argument(
        "--world",
        metavar="FILE",
        help="YAML objects (nodes, pods, ...) to start the simulated cluster with "
        "(default: three workers and demo apps labelled app=web and app=hello-kubernetes)",
    )
    _add_run_output(p)

    p = sub.add_parser(
        "resume",
        help="continue a run from its SQLite state after a crash",
        description="Continue the run stored in STATE (see `run --state`): every unfinished node picks up "
        "from its stored status; chaos objects are cleaned up as the workflow ends.",
    )
    p.add_argument("state", metavar="STATE")
    _add_run_output(p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    import gc

    # many long-lived node objects and few reference cycles: collect the old generation rarely
    gc.set_threshold(100_000, 50, 1000)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_INVALID
    from engine.logs import setup_logging

    setup_logging(getattr(args, "log_level", "warn"), getattr(args, "log_format", "text"))
    try:
        if args.command == "validate":
            return cmd_validate(args.files)
        if args.command == "run":
            return cmd_run(args)
        if args.command == "resume":
            return cmd_resume(args)
    except (InputError, ValidationFailed) as e:
        print(str(e), file=sys.stderr)
        return EXIT_INVALID
    except ChaosflowError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_INVALID
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    parser.error(f"unknown command {args.command}")
    return EXIT_INVALID


def cmd_validate(files: list[str]) -> int:
    from engine.loader import load_workflow_file

    bad = False
    for f in files:
        try:
            wfs = load_workflow_file(f)
        except (InputError, ValidationFailed) as e:
            print(str(e), file=sys.stderr)
            bad = True
            continue
        print(f"{f}: ok ({len(wfs)} workflow{'s' if len(wfs) != 1 else ''})")
    return EXIT_INVALID if bad else 0


def _options(args: argparse.Namespace) -> RunOptions:
    import os

    crash = os.environ.get("CHAOSFLOW_CRASH_AFTER_EVENTS")
    return RunOptions(
        seed=getattr(args, "seed", None),
        output=args.output,
        state=getattr(args, "state", None),
        progress=not args.quiet,
        real_time=getattr(args, "real_time", False),
        crash_after_events=int(crash) if crash else None,
        world=getattr(args, "world", None),
        checkpoint_interval=getattr(args, "checkpoint", 0.25),
    )


def cmd_run(args: argparse.Namespace) -> int:
    from engine.loader import load_workflow_file
    from engine.runner import run_local

    workflows = load_workflow_file(args.file)
    return run_local(workflows, _options(args))


def cmd_resume(args: argparse.Namespace) -> int:
    from engine.runner import resume_local

    return resume_local(args.state, _options(args))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
