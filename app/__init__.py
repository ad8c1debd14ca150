"""pilotfish: an Istio-compatible service-mesh control plane on asyncio."""

import os

__version__ = "0.1.0"

# gRPC's C-core fork handlers stay off unless asked for, set before anything imports grpc (every
# pilotfish module is below this package): ``POST /debug/diff`` forks the server
# (app/debug/diff.py) and the child never uses gRPC. With them on, the pre-fork handler pauses
# gRPC's threads or, a call in flight, skips, and a child died of SIGSEGV now and then (4 of
# 950 forks with gRPC clients in the process; 0 of 800 with them off).
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")
