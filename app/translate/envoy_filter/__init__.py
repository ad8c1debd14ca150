"""EnvoyFilter patches applied to built Envoy config, as istiod's networking/core/envoyfilter."""
