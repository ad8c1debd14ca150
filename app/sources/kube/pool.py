"""The worker pool the Kubernetes source validates objects in (app/workers.py). A module of its
own, importing no more than the pool: ``serve`` starts it before it imports the runtime, so the
worker's own start (a Python and the loader's imports, 0.1-0.2 s) is over when the first lists
come in instead of after."""

from __future__ import annotations

from app.workers import WorkerPool


def validation_pool() -> WorkerPool:
    return WorkerPool(1, name="kube-config", preload=("app.config.loader",))
