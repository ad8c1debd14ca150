"""Benchmarks. Importing ``app`` first turns gRPC's fork handlers off before a benchmark imports
grpc, as in the server (app/__init__.py)."""

import app  # noqa: F401
