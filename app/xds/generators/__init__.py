"""One generator per xDS type: synchronous pure functions of (proxy, push context)."""
