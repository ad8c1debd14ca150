"""DestinationRule policies as Envoy holds them: a root-namespace ``*`` rule and a specific override.

istiod picks one rule per service (pilot/pkg/model/push_context.go destinationRule): the
service's own rule when there is one, else the mesh-wide ``*`` rule of the root namespace;
the two are not merged. The clusters read back from a gateway Envoy's /config_dump must show
exactly that, before and after the specific rule is deleted.
"""

from __future__ import annotations

from typing import Any

from tests.e2e.conftest import StartEnvoy, StartPilotfish
from tests.e2e.harness import ConfigDir, wait_until
from tests.e2e.processes import GATEWAY, Envoy

APP = "outbound|80||app.default.svc.cluster.local"
APP_V1 = "outbound|80|v1|app.default.svc.cluster.local"
OTHER = "outbound|80||other.default.svc.cluster.local"
DB = "outbound|5432||db.example.internal"


def max_connections(cluster: dict[str, Any]) -> int | None:
    thresholds = cluster.get("circuit_breakers", {}).get("thresholds", [])
    default = [t for t in thresholds if t.get("priority", "DEFAULT") == "DEFAULT"]
    return default[0].get("max_connections") if default else None


def assert_mesh_default(cluster: dict[str, Any]) -> None:
    name = cluster["name"]
    assert max_connections(cluster) == 7, f"{name}: {cluster.get('circuit_breakers')}"
    outlier = cluster.get("outlier_detection", {})
    assert outlier.get("consecutive_5xx") == 7, f"{name}: {outlier}"
    assert outlier.get("interval") == "7s", f"{name}: {outlier}"
    assert outlier.get("base_ejection_time") == "70s", f"{name}: {outlier}"


def clusters_present(envoy: Envoy, *names: str) -> dict[str, dict[str, Any]]:
    clusters = envoy.active_clusters()
    return clusters if all(n in clusters for n in names) else {}


def test_root_namespace_rule_applies_where_no_specific_rule_overrides(
    config_dir: ConfigDir, start_pilotfish: StartPilotfish, start_envoy: StartEnvoy
) -> None:
    config_dir.render("destinationrules/services.yaml", "services.yaml")
    config_dir.render("destinationrules/mesh-default.yaml", "dr-mesh-default.yaml")
    config_dir.render("destinationrules/app.yaml", "dr-app.yaml")
    envoy = start_envoy(start_pilotfish(config_dir), GATEWAY)

    clusters = wait_until(lambda: clusters_present(envoy, APP, APP_V1, OTHER, DB), "the outbound clusters")
    # the `*` rule reaches services of every namespace and registry without their own rule
    assert_mesh_default(clusters[OTHER])
    assert_mesh_default(clusters[DB])
    # app's rule wins entirely, for the service and for its subset: no outlier detection inherited
    for name in (APP, APP_V1):
        assert max_connections(clusters[name]) == 3, f"{name}: {clusters[name].get('circuit_breakers')}"
        assert "outlier_detection" not in clusters[name], f"{name}: {clusters[name]['outlier_detection']}"

    # deleting app's rule re-sends its cluster with the mesh default; the subset cluster goes away
    config_dir.remove("dr-app.yaml")

    def app_on_mesh_default() -> dict[str, dict[str, Any]]:
        clusters = envoy.active_clusters()
        return clusters if max_connections(clusters.get(APP, {})) == 7 and APP_V1 not in clusters else {}

    clusters = wait_until(app_on_mesh_default, f"{APP} to fall back to the mesh-wide rule")
    assert_mesh_default(clusters[APP])
    assert_mesh_default(clusters[OTHER])
    wait_until(
        lambda: not envoy.config_dump()["ClustersConfigDump"].get("dynamic_warming_clusters"),
        "no cluster left warming (EDS follows every cluster CDS sends)",
    )
