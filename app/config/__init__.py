"""Typed, validated config model: Istio networking kinds, Kubernetes core kinds, MeshConfig."""
