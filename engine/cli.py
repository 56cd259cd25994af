"""The ``chaosflow`` command line.

Exit codes: 0 success, 1 the workflow failed, 2 invalid input (with one ``FILE: PATH: message``
line per problem and no traceback).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from engine.errors import ChaosflowError, InputError, ValidationFailed
from engine.runner import EXIT_INVALID, RunOptions

DESCRIPTION = """chaosflow — a Kubernetes-native workflow engine for chaos and simulation experiments.

Runs Workflow YAML (chaosflow.io/v1alpha1, or Chaos Mesh's chaos-mesh.org/v1alpha1) on the
embedded simulated cluster with a virtual clock, or against real clusters."""


def _add_metrics_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--metrics-addr",
        metavar="HOST:PORT",
        help="serve Prometheus metrics on http://HOST:PORT/metrics while the run lasts (docs/metrics.md)",
    )
    p.add_argument(
        "--pace",
        type=float,
        metavar="FACTOR",
        help="run the virtual clock no faster than FACTOR x wall time (watch or scrape a simulated run live)",
    )


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
        "-p",
        "--parameter",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="set workflow parameter NAME (repeatable; VALUE is read as a YAML scalar: 3, true, 10ms)",
    )
    p.add_argument(
        "--state",
        metavar="PATH",
        help="SQLite file for the run's state (enables `chaosflow resume` after a crash, and "
        "`chaosflow stop|terminate|suspend|unsuspend PATH` from another shell)",
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
    _add_metrics_flags(p)
    _add_run_output(p)
    _add_cluster_flags(p, "default (real clusters instead of the simulated one; real clock)")

    p = sub.add_parser(
        "resume",
        help="continue a run from its SQLite state after a crash",
        description="Continue the run stored in STATE (see `run --state`): every unfinished node picks up "
        "from its stored status; chaos objects are cleaned up as the workflow ends. Controls queued "
        "while no engine ran (`chaosflow stop STATE`, ...) are applied. To continue a *suspended* "
        "workflow or approve a manual step of a running one, use `chaosflow unsuspend STATE`.",
    )
    p.add_argument("state", metavar="STATE")
    _add_metrics_flags(p)
    _add_run_output(p)
    _add_control_parsers(sub)
    _add_kube_parsers(sub)
    from engine.cron_local import add_cron_parser

    add_cron_parser(sub, _add_run_output)
    from templates.library.megatest.run import add_megatest_parser

    add_megatest_parser(sub)
    return parser


_CONTROL_HELP = {
    "stop": (
        "stop a running workflow: clean up, run exit handlers (Argo's stop)",
        "Abort the workflow(s) of a `chaosflow run --state STATE` running in another process (or queue "
        "the stop for `chaosflow resume STATE`): active nodes release what they hold (chaos is removed), "
        "template exit handlers run innermost first, then the workflow's onExit. The workflow ends Failed.",
    ),
    "terminate": (
        "terminate a running workflow: no exit handlers (Argo's terminate); chaos is still removed",
        "Abort the workflow(s) in STATE without running exit handlers (running ones are stopped). Chaos "
        "objects are still deleted: chaos is never left behind.",
    ),
    "suspend": (
        "suspend a running workflow or node: nothing new starts until `unsuspend`",
        "Suspend the workflow in STATE, or with --node the subtree of one node: nodes not yet started "
        "wait, Suspend steps whose time is up wait (keeping their due times); running pods go on and "
        "injected chaos stays until its duration ends. Continue with `chaosflow unsuspend`.",
    ),
    "unsuspend": (
        "continue a suspended workflow or node; approve a manual Suspend step",
        "Continue what `chaosflow suspend` suspended. Also ends manual-approval Suspend steps "
        "(`manual: true`): without --node every one that waits, with --node that step (a Suspend "
        "with a duration then ends early). Not to be confused with `chaosflow resume`, which continues "
        "a run after a crash.",
    ),
}


_KUBE_CONTROL = """
Kubernetes form: `chaosflow %s --kubeconfig PATH [--context NAME] [-n NAMESPACE] NAME%s` sets the
Workflow's control annotation (merge patch; docs/design.md) and waits until the controller's status
shows it applied. Exit 0 applied, 1 rejected (finished workflow, forbidden, not applied within
--wait), 2 bad input (no such workflow)."""


def _add_control_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    for action, (short, long) in _CONTROL_HELP.items():
        nodes = action in ("suspend", "unsuspend")
        p = sub.add_parser(
            action,
            help=short,
            description=long + _KUBE_CONTROL % (action, " [--node X]" if nodes else ""),
        )
        p.add_argument(
            "state",
            metavar="STATE|NAME",
            help="the SQLite state of the run (`run --state`); with --kubeconfig/--context/-n: the "
            "Workflow object's name",
        )
        p.add_argument("--workflow", metavar="NAME", help="only this workflow (name or namespace/name)")
        if nodes:
            p.add_argument("--node", metavar="NAME", help="a node name (e.g. approve-3) or a template name")
        else:
            p.add_argument("--message", metavar="TEXT", help="why (shown as the workflow's message)")
        p.add_argument(
            "--wait",
            type=float,
            default=30.0,
            metavar="SECONDS",
            help="how long to wait for the running engine (or the controller) to apply it (default 30; "
            "Kubernetes form: 0 = do not wait)",
        )
        p.add_argument("--kubeconfig", metavar="PATH", help="Kubernetes form: the controller's cluster")
        p.add_argument("--context", metavar="NAME", help="kubeconfig context (default: the current one)")
        p.add_argument(
            "-n", "--namespace", metavar="NS", help="the Workflow's namespace (default: the context's)"
        )


def _add_cluster_flags(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--kubeconfig", metavar="PATH", help=f"kubeconfig of the {what} cluster")
    p.add_argument("--context", metavar="NAME", help="kubeconfig context (default: the current one)")
    p.add_argument(
        "--cluster",
        action="append",
        default=[],
        metavar="NAME=KUBECONFIG[:CONTEXT]",
        help="an extra named target cluster (repeatable); templates name it in chaos.cluster",
    )


def _add_kube_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "crds",
        help="print the CustomResourceDefinitions generated from the models",
        description="Print the CRDs (structural schemas, status subresource, printer columns) "
        "generated from the pydantic models; --output-dir writes one file per CRD.",
    )
    p.add_argument("--output-dir", metavar="DIR", help="write <plural>.yaml files into DIR")

    p = sub.add_parser(
        "controller",
        help="run as a Kubernetes controller: watch Workflow objects and run them",
        description="Watch Workflow objects (all namespaces or --namespace), run them on the real "
        "clock, write status to the API server; leader election on a Lease; /healthz /readyz /metrics.",
    )
    _add_cluster_flags(p, "home (default: in-cluster config)")
    p.add_argument("--namespace", action="append", default=[], help="watch only these namespaces")
    p.add_argument("--leader-elect", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--lease-name", default="chaosflow-controller")
    p.add_argument("--lease-namespace", default=None, help="default: the pod's namespace or 'default'")
    p.add_argument("--lease-duration", type=float, default=15.0, metavar="SECONDS")
    p.add_argument("--renew-deadline", type=float, default=10.0, metavar="SECONDS")
    p.add_argument("--retry-period", type=float, default=2.0, metavar="SECONDS")
    p.add_argument("--identity", default=None, help="leader-election identity (default: hostname_pid)")
    p.add_argument("--health-addr", default=":8080", metavar="[HOST]:PORT", help="'' disables")
    p.add_argument("--actor-workers", type=int, default=8)
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warn", "error"])
    p.add_argument("--log-format", default="text", choices=["text", "json"])


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
        if args.command in _CONTROL_HELP:
            return cmd_control(args)
        if args.command == "crds":
            return cmd_crds(args)
        if args.command == "controller":
            from engine.controller import cmd_controller

            return cmd_controller(args)
        if args.command == "megatest":
            from templates.library.megatest.run import cmd_megatest

            return cmd_megatest(args)
        if args.command == "cron":
            from engine.cron_local import cmd_cron

            return cmd_cron(args)
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
            from engine.cron import validate_cron_file

            n_cron = validate_cron_file(f)  # None unless the file holds CronWorkflows
            if n_cron is not None:
                print(f"{f}: ok ({n_cron} cron workflow{'s' if n_cron != 1 else ''})")
                continue
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
        clusters=_kube_clusters(args),
        metrics_addr=getattr(args, "metrics_addr", None),
        pace=getattr(args, "pace", None),
        parameters=_parameters(getattr(args, "parameter", None) or []),
    )


def _parameters(args: list[str]) -> dict[str, Any]:
    from engine.render import parse_parameter_arg

    return dict(parse_parameter_arg(a) for a in args)


def cmd_control(args: argparse.Namespace) -> int:
    from engine.control import kube_control, send_control

    if args.kubeconfig or args.context or args.namespace:
        for flag in ("workflow", "message"):
            if getattr(args, flag, None):
                print(f"--{flag} is for the local form (chaosflow {args.command} STATE)", file=sys.stderr)
                return EXIT_INVALID
        return kube_control(
            args.command,
            args.state,
            namespace=args.namespace,
            kubeconfig=args.kubeconfig,
            context=args.context,
            node=getattr(args, "node", None),
            wait=args.wait,
            out=sys.stdout,
            err=sys.stderr,
        )
    return send_control(
        args.state,
        args.command,
        workflow=args.workflow,
        node=getattr(args, "node", None),
        message=getattr(args, "message", None),
        wait=args.wait,
        out=sys.stdout,
        err=sys.stderr,
    )


def _kube_clusters(args: argparse.Namespace) -> dict[str, Any] | None:
    """--kubeconfig/--context/--cluster: real clusters for `run` (None: the simulated cluster)."""
    if not (
        getattr(args, "kubeconfig", None) or getattr(args, "context", None) or getattr(args, "cluster", None)
    ):
        return None
    from engine.controller import cluster_configs

    try:
        return cluster_configs(args, in_cluster_default=False)
    except ValueError as e:
        raise ChaosflowError(str(e)) from e


def cmd_run(args: argparse.Namespace) -> int:
    from engine.loader import load_workflow_file
    from engine.runner import run_local

    workflows = load_workflow_file(args.file)
    return run_local(workflows, _options(args))


def cmd_crds(args: argparse.Namespace) -> int:
    from pathlib import Path

    from engine.crd import all_crds, render, render_all

    if args.output_dir:
        out = Path(args.output_dir)
        out.mkdir(parents=True, exist_ok=True)
        for fname, obj in all_crds().items():
            (out / fname).write_text(render(obj))
            print(out / fname)
        return 0
    sys.stdout.write(render_all())
    return 0


def cmd_resume(args: argparse.Namespace) -> int:
    from engine.runner import resume_local

    return resume_local(args.state, _options(args))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
