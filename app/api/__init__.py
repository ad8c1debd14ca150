"""Generated protobuf schemas for Istio-compatible config (networking, mesh)."""
