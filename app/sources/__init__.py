"""Informers: turn the outside world (a config directory, a Kubernetes API) into ConfigEvents."""
