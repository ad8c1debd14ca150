"""The service registry: Kubernetes and ServiceEntry controllers feeding one EndpointIndex."""
