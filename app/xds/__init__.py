"""xDS serving: per-stream protocol sessions, push pipeline, resource generators and Envoy builders."""
