"""Envoy routes: the builders, a sidecar's route configurations from their inputs values
(``sidecar``) and a gateway's (``gateway``)."""
