"""Translation: the model, for one proxy, into Envoy config (istiod pilot/pkg/networking/core).

Pure builders grouped by resource (clusters, endpoints, listeners, routes, the name table,
secrets); nothing here knows of serving, caching or streams (app/xds).
"""
