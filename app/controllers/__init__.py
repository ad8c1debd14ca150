"""What pilotfish writes to the API server, only as the elected leader of a Lease (DESIGN §4):
the ``istio-ca-root-cert`` ConfigMap in every namespace and ServiceEntry address allocation.
An I/O edge: it may use app.sources and app.config; nothing pure imports it."""
