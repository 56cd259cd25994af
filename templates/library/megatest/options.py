"""megatest's flags (the seed's names and defaults, plus ours) and their validation."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from engine.duration import DurationError, format_duration, parse_duration
from engine.errors import InputError


@dataclass
class MegatestOptions:
    storage_classes: list[str]
    log_level: str = "info"
    kubeconfig: str = ""
    max_volumes: int = 10
    volume_step_min: int = 1
    volume_step_max: int = 3
    step_period_min: float = 10.0
    step_period_max: float = 30.0
    volume_period_min: float = 60.0
    volume_period_max: float = 300.0
    enable_pod_destroyer: bool = False
    enable_volume_resizer: bool = False
    enable_volume_replica_destroyer: bool = False
    enable_volume_replica_creator: bool = False
    parent_kubeconfig: str = ""
    vm_namespace: str = ""
    enable_chaos_network_block: bool = False
    enable_chaos_network_degrade: bool = False
    enable_chaos_vm_reboot: bool = False
    chaos_period_min: float = 60.0
    chaos_period_max: float = 300.0
    chaos_incident_min: float = 10.0
    chaos_incident_max: float = 60.0
    chaos_loss_percent: float = 0.01
    chaos_partition_group_size: int = 0
    # ours
    sim: bool = True
    duration: float = 3600.0
    seed: int = 0
    name: str = "megatest"
    sim_storage_nodes: int = 6
    sim_bugs: list[str] = field(default_factory=list)
    metrics_addr: str | None = None  # HOST:PORT: serve Prometheus /metrics while the run lasts
    pace: float | None = None  # sim: at most PACE virtual seconds per wall second

    @property
    def chaos(self) -> bool:
        return (
            self.enable_chaos_network_block
            or self.enable_chaos_network_degrade
            or self.enable_chaos_vm_reboot
        )

    @property
    def vm_ns(self) -> str:
        return self.vm_namespace or "e2e-sds-test-cluster"

    def problems(self, known_storage_classes: list[str] | None = None) -> list[str]:
        """One line per invalid flag or combination."""
        out: list[str] = []
        if not self.storage_classes:
            out.append("--storage-classes: required (a comma-separated list)")
        for lo, hi, flag in (
            (self.volume_step_min, self.volume_step_max, "volume-step"),
            (self.step_period_min, self.step_period_max, "step-period"),
            (self.volume_period_min, self.volume_period_max, "volume-period"),
            (self.chaos_period_min, self.chaos_period_max, "chaos-period"),
            (self.chaos_incident_min, self.chaos_incident_max, "chaos-incident"),
        ):
            if lo > hi:
                out.append(f"--{flag}-min ({_fmt(lo)}) is greater than --{flag}-max ({_fmt(hi)})")
            if lo < 0:
                out.append(f"--{flag}-min must not be negative")
        if self.volume_step_min < 1:
            out.append("--volume-step-min must be at least 1")
        if self.step_period_min <= 0:
            out.append("--step-period-min must be positive")
        if self.volume_period_min <= 0:
            out.append("--volume-period-min must be positive")
        if self.chaos_period_min <= 0:
            out.append("--chaos-period-min must be positive")
        if self.max_volumes < 0:
            out.append("--max-volumes must not be negative")
        if not 0.0 <= self.chaos_loss_percent <= 1.0:
            out.append(
                f"--chaos-loss-percent must be within 0.0..1.0 (0.01 = 1%), got {self.chaos_loss_percent:g}"
            )
        if self.chaos_partition_group_size < 0:
            out.append("--chaos-partition-group-size must not be negative (0 = half)")
        if self.duration <= 0:
            out.append("--duration must be positive")
        if self.log_level not in ("debug", "info", "warn", "error"):
            out.append(f"--log-level: {self.log_level!r} is not one of debug, info, warn, error")
        if not self.sim and self.chaos:
            if not self.parent_kubeconfig:
                out.append(
                    "chaos goroutines on a real cluster need --parent-kubeconfig (the DVP parent cluster)"
                )
            if not self.vm_namespace:
                out.append(
                    "chaos goroutines on a real cluster need --vm-namespace (the namespace of the VMs)"
                )
        if self.metrics_addr is not None:
            from engine.runner import metrics_addr_problem

            bad = metrics_addr_problem(self.metrics_addr)
            if bad:
                out.append(bad)
        if self.pace is not None:
            if not self.pace > 0:
                out.append(f"--pace must be positive, got {self.pace:g}")
            elif not self.sim:
                out.append(
                    "--pace paces the simulated clock: it needs the simulated clusters (no --kubeconfig)"
                )
        if self.sim and known_storage_classes is not None:
            unknown = [s for s in self.storage_classes if s.split(":")[0] not in known_storage_classes]
            if unknown:
                out.append(
                    f"--storage-classes: unknown on the simulated cluster: {', '.join(unknown)} "
                    f"(known: {', '.join(known_storage_classes)})"
                )
        return out


def _fmt(v: float) -> str:
    return format_duration(v) if isinstance(v, float) else str(v)


def _duration(text: str) -> float:
    try:
        return parse_duration(text)
    except DurationError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_megatest_flags(p: argparse.ArgumentParser) -> None:
    """The seed's flags with its names and defaults, then ours."""
    g = p.add_argument_group("general")
    g.add_argument("--log-level", default="info", choices=["debug", "info", "warn", "error"])
    g.add_argument("--log-format", default="text", choices=["text", "json"], help="json: JSON lines")
    b = p.add_argument_group("base goroutines")
    b.add_argument("--storage-classes", required=True, help="comma-separated storage classes (required)")
    b.add_argument("--kubeconfig", default="", help="kubeconfig of the tested (nested) cluster")
    b.add_argument("--max-volumes", type=int, default=10, help="max concurrent ReplicatedVolumes (10)")
    b.add_argument("--volume-step-min", type=int, default=1, help="min RVs created per step (1)")
    b.add_argument("--volume-step-max", type=int, default=3, help="max RVs created per step (3)")
    b.add_argument("--step-period-min", type=_duration, default=10.0, help="min time between steps (10s)")
    b.add_argument("--step-period-max", type=_duration, default=30.0, help="max time between steps (30s)")
    b.add_argument("--volume-period-min", type=_duration, default=60.0, help="min RV lifetime (1m0s)")
    b.add_argument("--volume-period-max", type=_duration, default=300.0, help="max RV lifetime (5m0s)")
    b.add_argument("--enable-pod-destroyer", action="store_true")
    b.add_argument("--enable-volume-resizer", action="store_true", help="deferred in the seed (ОТЛОЖЕНО)")
    b.add_argument("--enable-volume-replica-destroyer", action="store_true")
    b.add_argument("--enable-volume-replica-creator", action="store_true")
    c = p.add_argument_group("chaos")
    c.add_argument("--parent-kubeconfig", default="", help="kubeconfig of the parent DVP cluster (chaos)")
    c.add_argument("--vm-namespace", default="", help="namespace of the VMs in the parent cluster (chaos)")
    c.add_argument("--enable-chaos-network-block", action="store_true")
    c.add_argument("--enable-chaos-network-degrade", action="store_true")
    c.add_argument("--enable-chaos-vm-reboot", action="store_true")
    c.add_argument(
        "--chaos-period-min", type=_duration, default=60.0, help="min time between incidents (1m0s)"
    )
    c.add_argument(
        "--chaos-period-max", type=_duration, default=300.0, help="max time between incidents (5m0s)"
    )
    c.add_argument("--chaos-incident-min", type=_duration, default=10.0, help="min incident duration (10s)")
    c.add_argument("--chaos-incident-max", type=_duration, default=60.0, help="max incident duration (1m0s)")
    c.add_argument("--chaos-loss-percent", type=float, default=0.01, help="packet loss 0.0..1.0 (0.01 = 1%%)")
    c.add_argument(
        "--chaos-partition-group-size", type=int, default=0, help="split-brain group A size (0 = half)"
    )
    o = p.add_argument_group("chaosflow")
    o.add_argument("--sim", action="store_true", help="simulated clusters (default without --kubeconfig)")
    o.add_argument("--duration", type=_duration, default=3600.0, help="how long the run lasts (1h)")
    o.add_argument("--seed", type=int, default=None, help="seed of every random choice (0)")
    o.add_argument("--name", default="megatest", help="workflow name (megatest)")
    o.add_argument(
        "-o",
        "--output",
        choices=["yaml", "cron"],
        help="yaml: print the Workflow instead of running it; cron: print a CronWorkflow running it on "
        "--schedule (docs/megatest.md, Scheduling megatests)",
    )
    o.add_argument(
        "--schedule",
        action="append",
        default=[],
        metavar="CRON",
        help='-o cron: when to run, e.g. "0 2 * * *" (repeatable; docs/cron.md)',
    )
    o.add_argument(
        "--concurrency-policy",
        choices=["Allow", "Forbid", "Replace"],
        default=None,
        help="-o cron: a tick while the previous megatest still runs (Forbid)",
    )
    o.add_argument("--timezone", default=None, metavar="TZ", help="-o cron: IANA zone of --schedule (UTC)")
    o.add_argument("--report", choices=["text", "json"], default="text", help="report format (text)")
    o.add_argument("--sim-storage-nodes", type=int, default=6, help="sim: storage nodes / VMs (6)")
    o.add_argument(
        "--sim-bug",
        action="append",
        default=[],
        metavar="NAME",
        help="sim: inject a controller bug (actors.sim.rv.RVBugs field, e.g. "
        "quorum_not_regained_after_split_brain); repeatable",
    )
    o.add_argument(
        "--metrics-addr",
        metavar="HOST:PORT",
        help="serve Prometheus metrics (engine and megatest figures) on http://HOST:PORT/metrics while "
        "the run lasts (docs/metrics.md)",
    )
    o.add_argument(
        "--pace",
        type=float,
        metavar="FACTOR",
        help="sim: run the virtual clock no faster than FACTOR x wall time (watch or scrape it live)",
    )


def options_from_args(a: argparse.Namespace) -> MegatestOptions:
    if a.sim and a.kubeconfig:
        raise InputError("--sim", None, "--sim and --kubeconfig exclude each other")
    return MegatestOptions(
        storage_classes=[s.strip() for s in a.storage_classes.split(",") if s.strip()],
        log_level=a.log_level,
        kubeconfig=a.kubeconfig,
        max_volumes=a.max_volumes,
        volume_step_min=a.volume_step_min,
        volume_step_max=a.volume_step_max,
        step_period_min=a.step_period_min,
        step_period_max=a.step_period_max,
        volume_period_min=a.volume_period_min,
        volume_period_max=a.volume_period_max,
        enable_pod_destroyer=a.enable_pod_destroyer,
        enable_volume_resizer=a.enable_volume_resizer,
        enable_volume_replica_destroyer=a.enable_volume_replica_destroyer,
        enable_volume_replica_creator=a.enable_volume_replica_creator,
        parent_kubeconfig=a.parent_kubeconfig,
        vm_namespace=a.vm_namespace,
        enable_chaos_network_block=a.enable_chaos_network_block,
        enable_chaos_network_degrade=a.enable_chaos_network_degrade,
        enable_chaos_vm_reboot=a.enable_chaos_vm_reboot,
        chaos_period_min=a.chaos_period_min,
        chaos_period_max=a.chaos_period_max,
        chaos_incident_min=a.chaos_incident_min,
        chaos_incident_max=a.chaos_incident_max,
        chaos_loss_percent=a.chaos_loss_percent,
        chaos_partition_group_size=a.chaos_partition_group_size,
        sim=not a.kubeconfig,
        duration=a.duration,
        seed=a.seed if a.seed is not None else 0,
        name=a.name,
        sim_storage_nodes=a.sim_storage_nodes,
        sim_bugs=list(a.sim_bug),
        metrics_addr=getattr(a, "metrics_addr", None),
        pace=getattr(a, "pace", None),
    )
