"""Envoy endpoints: the builders, and what one proxy gets (``for_proxy``)."""
