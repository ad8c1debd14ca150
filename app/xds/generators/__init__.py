"""One generator per xDS type, the registry mapping type URLs to them, and the ResourceSource
over it (``source.XdsGenerator``)."""
