"""The simulated replicated-volume world megatest plays in: a nested cluster ("test") with the
sds-replicated-volume controllers, running on VMs of a DVP virtualization cluster ("parent").

Public surface::

    build_megatest_world(world, spec=None, **fields) -> MegatestSim   # populate + install
    restore_megatest_world(world, snapshot) -> MegatestSim            # crash / resume
    attach_megatest_world(world, spec=None) -> MegatestSim            # controllers only
    MegatestWorldSpec, StorageClassSpec, RVTiming, RVBugs              # knobs
    MegatestSim.set_bugs(attach_stuck=True)                            # inject bugs at runtime

The model is described in :mod:`actors.sim.rv.controller` (volumes, agents, controller, network),
:mod:`actors.sim.rv.drbd`, :mod:`actors.sim.rv.network`, :mod:`actors.sim.rv.virtualization` and
:mod:`actors.sim.rv.controlplane`.
"""

from __future__ import annotations

from actors.sim.rv.config import MegatestWorldSpec, RVBugs, RVTiming, StorageClassSpec
from actors.sim.rv.controller import ReplicatedVolumeController
from actors.sim.rv.controlplane import ControlPlaneController
from actors.sim.rv.network import NetworkModel, PolicySet, parse_iperf, parse_iptables
from actors.sim.rv.virtualization import VirtualizationController
from actors.sim.rv.world import (
    MegatestSim,
    attach_megatest_world,
    build_megatest_world,
    install_controllers,
    restore_megatest_world,
)

__all__ = [
    "ControlPlaneController",
    "MegatestSim",
    "MegatestWorldSpec",
    "NetworkModel",
    "PolicySet",
    "RVBugs",
    "RVTiming",
    "ReplicatedVolumeController",
    "StorageClassSpec",
    "VirtualizationController",
    "attach_megatest_world",
    "build_megatest_world",
    "install_controllers",
    "parse_iperf",
    "parse_iptables",
    "restore_megatest_world",
]
