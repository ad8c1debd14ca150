"""pilotfish: an Istio-compatible service-mesh control plane on asyncio."""

__version__ = "0.1.0"
