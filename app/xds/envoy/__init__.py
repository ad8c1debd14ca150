"""Pure builders of Envoy protos (clusters, TLS contexts) following istiod's naming and shapes."""
