"""The mesh as pilotfish sees it: services, endpoints, proxies, the PushContext snapshot."""
