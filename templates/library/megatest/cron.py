"""``chaosflow megatest ... -o cron --schedule "0 2 * * *"``: the megatest Workflow wrapped in a
CronWorkflow, so a nightly megatest is one ``kubectl apply`` (or ``chaosflow cron`` on the sim).

The CronWorkflow's ``workflowSpec`` is the megatest Workflow's spec, except:

- no ``seed``: every tick's child draws its own, derived from the CronWorkflow and the tick
  (``engine.cron.child_seed``; the child's ``spec.seed`` shows it), so each night tests other
  volumes, incidents and timings, and overlapping children (``Allow``) do not pick the same RV
  names. ``chaosflow megatest --seed <child's spec.seed>`` with the same flags replays a night
  (``--seed`` given with ``-o cron`` is reported on stderr and not used).

The detached volume workflows are named after the running megatest (``<child>-vol-...``, see
``volume-spawn`` in the builder), so one night's volumes never take the names of an earlier
night's (still on the cluster, or in the engine, when the next child starts).

The Workflow's labels and annotations go to ``workflowMetadata`` (every child carries them), the
simulated world's ``chaosflow.io/sim-world`` included: ``chaosflow cron`` builds that world once
and the children share it, as the nights of a real cluster do.
"""

from __future__ import annotations

import argparse
from typing import Any

from engine.model import Workflow
from templates.library.megatest.options import MegatestOptions

#: the concurrency policy of ``-o cron`` without ``--concurrency-policy``: two megatests on one
#: cluster would share (and, with the start-up cleanup, remove) each other's chaos
DEFAULT_CONCURRENCY_POLICY = "Forbid"
CRON_FLAGS = ("schedule", "concurrency_policy", "timezone")


def cron_problems(args: argparse.Namespace) -> list[str]:
    """The cron flags: ``--schedule`` required with ``-o cron``, valid schedules and time zone;
    cron flags without ``-o cron`` are an error (they would be ignored)."""
    from triggers.cron import ScheduleError, load_timezone, parse_schedule

    schedules: list[str] = list(getattr(args, "schedule", None) or [])
    tz: str | None = getattr(args, "timezone", None)
    policy: str | None = getattr(args, "concurrency_policy", None)
    if getattr(args, "output", None) != "cron":
        used = [
            f"--{f.replace('_', '-')}"
            for f, v in (("schedule", schedules), ("timezone", tz), ("concurrency_policy", policy))
            if v
        ]
        return [f"{', '.join(used)}: only with -o cron"] if used else []
    if not schedules:
        return ['-o cron needs --schedule (a cron schedule such as "0 2 * * *"; repeatable)']
    out: list[str] = []
    try:
        load_timezone(tz)
    except ScheduleError as e:
        return [f"--timezone: {e}"]
    for s in schedules:
        try:
            parse_schedule(s, tz)
        except ScheduleError as e:
            out.append(f"--schedule {s!r}: {e}")
    return out


def cron_workflow(
    o: MegatestOptions,
    wf: Workflow,
    schedules: list[str],
    concurrency_policy: str | None = None,
    timezone: str | None = None,
) -> dict[str, Any]:
    """The CronWorkflow document scheduling ``wf`` (``build_workflow(o)``)."""
    spec = wf.spec.model_dump(mode="json", exclude_none=True, by_alias=True)
    spec.pop("seed", None)
    cron_spec: dict[str, Any] = {}
    if len(schedules) == 1:
        cron_spec["schedule"] = schedules[0]
    else:
        cron_spec["schedules"] = list(schedules)
    if timezone:
        cron_spec["timezone"] = timezone
    cron_spec["concurrencyPolicy"] = concurrency_policy or DEFAULT_CONCURRENCY_POLICY
    meta: dict[str, Any] = {}
    if wf.metadata.labels:
        meta["labels"] = dict(wf.metadata.labels)
    if wf.metadata.annotations:
        meta["annotations"] = dict(wf.metadata.annotations)
    if meta:
        cron_spec["workflowMetadata"] = meta
    cron_spec["workflowSpec"] = spec
    return {
        "apiVersion": "chaosflow.io/v1alpha1",
        "kind": "CronWorkflow",
        "metadata": {"name": o.name},
        "spec": cron_spec,
    }


def cron_yaml(o: MegatestOptions, wf: Workflow, args: argparse.Namespace) -> str:
    """``-o cron``: the CronWorkflow as YAML (validated like ``chaosflow validate`` would)."""
    from engine.cron import load_cron_workflows_text
    from engine.yamlio import dump_yaml

    doc = cron_workflow(
        o,
        wf,
        list(args.schedule),
        getattr(args, "concurrency_policy", None),
        getattr(args, "timezone", None),
    )
    text = dump_yaml(doc)
    load_cron_workflows_text(text, "megatest -o cron")  # a bug here must not reach a cluster
    head = (
        "# chaosflow megatest -o cron: each tick creates the Workflow <name>-<unix time> with its own seed\n"
        "# (spec.seed of the child). Locally: chaosflow cron FILE --until 3d [--state S.sqlite]\n"
    )
    return head + text


__all__ = ["CRON_FLAGS", "DEFAULT_CONCURRENCY_POLICY", "cron_problems", "cron_workflow", "cron_yaml"]
