"""pilotfish: an Istio-compatible service-mesh control plane on asyncio."""
