"""Constants about template kinds that modules at every layer need (no imports)."""

from __future__ import annotations

# Chaos Mesh's chaos kinds: templateType -> field holding the inline chaos spec.
CHAOS_MESH_KINDS: dict[str, str] = {
    "PodChaos": "podChaos",
    "NetworkChaos": "networkChaos",
    "StressChaos": "stressChaos",
    "IOChaos": "ioChaos",
    "TimeChaos": "timeChaos",
    "KernelChaos": "kernelChaos",
    "DNSChaos": "dnsChaos",
    "HTTPChaos": "httpChaos",
    "JVMChaos": "jvmChaos",
    "AWSChaos": "awsChaos",
    "GCPChaos": "gcpChaos",
    "AzureChaos": "azureChaos",
    "BlockChaos": "blockChaos",
    "PhysicalMachineChaos": "physicalmachineChaos",
}
