"""RequestAuthentication ``jwksUri`` keys fetched by the control plane, as istiod does by default.

istiod's PILOT_JWT_ENABLE_REMOTE_JWKS decides who fetches a ``jwksUri``: ``istiod``/``false``
(the default) has istiod fetch the keys and inline them in the proxy's jwt_authn provider, with
a fixed key nobody can sign for while the fetch fails (requests with a token are refused, none
get through unverified); ``envoy`` hands Envoy the uri to fetch through the outbound cluster of
its host; ``hybrid``/``true`` does that when the host is a service of the mesh and fetches
itself otherwise (pilot/pkg/security/authn/policy_applier.go, pkg/jwt). The fetching is I/O
(app/security/jwks.py); here the keys it found are put into the policies a PushContext holds,
so translation reads an inline ``jwks`` as if the user had written it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable, Mapping
from urllib.parse import urlsplit

from app.api import security as sec
from app.config.objects import ConfigObject

ISTIOD, HYBRID, ENVOY = "istiod", "hybrid", "envoy"

# an RSA public key whose private key was never kept (generated once for pilotfish and thrown
# away): what a provider verifies against while its keys cannot be fetched, so every token fails
UNFETCHED_JWKS = json.dumps(
    {
        "keys": [
            {
                "kty": "RSA",
                "e": "AQAB",
                "kid": "pilotfish-unfetched",
                "n": (
                    "1prGc3xYbI_o29og_WN-Z5FZjvRNg3GiebBt2GKhAFBlBXur0otQyM5Ivxc1EGByp3Kr4KMBZWCQHYfiRoxAzOvHSEmHzGfrM1Yfubc"
                    "9dyH1UtRVIjH9b7N_noUP1tXxj2DiRtsobVGWlRzZrqzz_sIlBvde6-uTyOK2F-lhAAGpFBOGgXMKuXtvCQyNJwkVNGZf3hGGrHdHbOc"
                    "r1r-5yBDgYcYhZySUGEwwkDvWmL5o6IE9MnS_nGeQjtDv58PPk4I00P3ulJ-C_Mi_AEbrhEUzwRX5yG7GjwHKbV1R01VqVNpG5RmWu09"
                    "pjPASHPyBK6_EK5Xqoq40XDQVL3KL_w"
                ),
            }
        ]
    }
)


def fetch_mode(text: str) -> str:
    """istiod ConvertToJwksFetchMode: unknown values mean ``istiod``."""
    return {"istiod": ISTIOD, "false": ISTIOD, "hybrid": HYBRID, "true": HYBRID, "envoy": ENVOY}.get(text, ISTIOD)


def _host(uri: str) -> str:
    return urlsplit(uri).hostname or ""


def fetched_here(uri: str, mode: str, mesh_host: Callable[[str], bool]) -> bool:
    """Whether the control plane fetches ``uri``'s keys (else Envoy does)."""
    return mode == ISTIOD or (mode == HYBRID and not mesh_host(_host(uri)))


def uris_to_fetch(policies: Iterable[ConfigObject], mode: str, mesh_host: Callable[[str], bool]) -> dict[str, float]:
    """The ``jwksUri``s the control plane fetches, with the longest timeout a rule gives (s)."""
    out: dict[str, float] = {}
    for obj in policies:
        for rule in obj.spec.jwt_rules:
            if rule.jwks_uri and not rule.jwks and fetched_here(rule.jwks_uri, mode, mesh_host):
                timeout = rule.timeout.ToTimedelta().total_seconds() if rule.HasField("timeout") else 5.0
                out[rule.jwks_uri] = max(out.get(rule.jwks_uri, 0.0), timeout)
    return out


def with_fetched_keys(
    policies: Iterable[ConfigObject], keys: Mapping[str, str], mode: str, mesh_host: Callable[[str], bool]
) -> tuple[ConfigObject, ...]:
    """The policies with each control-plane-fetched ``jwksUri`` rule given its keys inline (the
    unfetched key while there are none); the others as they are."""
    out = []
    for obj in policies:
        rules = obj.spec.jwt_rules
        if not any(r.jwks_uri and not r.jwks and fetched_here(r.jwks_uri, mode, mesh_host) for r in rules):
            out.append(obj)
            continue
        spec = sec.RequestAuthentication()
        spec.CopyFrom(obj.spec)
        for rule in spec.jwt_rules:
            if rule.jwks_uri and not rule.jwks and fetched_here(rule.jwks_uri, mode, mesh_host):
                rule.jwks = keys.get(rule.jwks_uri, UNFETCHED_JWKS)
        out.append(dataclasses.replace(obj, spec=spec))
    return tuple(out)
