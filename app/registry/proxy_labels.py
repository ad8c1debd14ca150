"""A proxy's labels and locality from its pod, as istiod gives them to a connected proxy. Pure.

istiod's computeProxyState (pilot/pkg/xds/ads.go), when a stream starts and on each proxy update
(its pod relabelled), runs ``Proxy.SetWorkloadLabels`` (pilot/pkg/model/context.go) then
``setTopologyLabels``:

* a VM proxy (its metadata labels hold ``istio.io/test-vm``) keeps its metadata labels;
* else, when the registry knows the proxy's pod (by the id ``POD.NAMESPACE`` when that
  namespace is the proxy's: podKeyByProxy), the labels are the node's static labels
  (``STATIC_LABELS``, from ``ISTIO_METAJSON_LABELS``) overlaid by the pod's labels with the
  pod's locality as topology labels (kube Controller.GetProxyWorkloadLabels, AugmentLabels): the
  pod's win over a static label of the same key;
* else the metadata labels;
* the locality is the one those labels give (region/zone/subzone labels, else the locality
  label), else the xDS node's; and the labels then carry the topology labels of the proxy's
  cluster, locality, Kubernetes node (``NODE_NAME``) and network (AugmentLabels: a network label
  the labels hold already stays).

istiod finds a pod by IP only behind ENABLE_PROXY_FIND_POD_BY_IP (off by default), and its
ServiceEntry registry answers only for a proxy at a ServiceEntry endpoint's address: neither is
done here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from app.config.labels import CLUSTER_LABEL, HOSTNAME_LABEL, NETWORK_LABEL, REGION_LABEL, SUBZONE_LABEL, ZONE_LABEL
from app.model.proxy import Proxy
from app.registry.kube import Workload
from app.registry.locality import ObjectKey, locality_label

TEST_VM_LABEL = "istio.io/test-vm"  # istiod constants.TestVMLabel: Proxy.IsVM


def pod_key_by_proxy(proxy: Proxy) -> ObjectKey | None:
    """The (namespace, name) of the pod the proxy's id names, when its namespace is the proxy's
    (istiod podKeyByProxy); None otherwise."""
    name, dot, namespace = proxy.id.partition(".")
    return (namespace, name) if dot and namespace == proxy.namespace else None


def _split(locality: str) -> tuple[str, str, str]:
    """istiod SplitLocalityLabel: region, zone, subzone of ``a/b/c`` (missing parts empty)."""
    parts = [*locality.split("/"), "", ""]
    return parts[0], parts[1], parts[2]


def augment_labels(
    labels: Mapping[str, str], cluster_id: str, locality: str, node_name: str, network: str
) -> dict[str, str]:
    """istiod AugmentLabels: ``labels`` with the topology labels of what is given (an empty
    value adds nothing; a network label already held wins over ``network``)."""
    out = dict(labels)
    region, zone, subzone = _split(locality)
    for key, value in (
        (REGION_LABEL, region),
        (ZONE_LABEL, zone),
        (SUBZONE_LABEL, subzone),
        (CLUSTER_LABEL, cluster_id),
        (HOSTNAME_LABEL, node_name),
    ):
        if value:
            out[key] = value
    if network and not out.get(NETWORK_LABEL):
        out[NETWORK_LABEL] = network
    return out


def locality_from_labels(labels: Mapping[str, str]) -> str | None:
    """istiod localityFromProxyLabels: the region/zone/subzone labels when any is present, else
    the locality label; None when the labels give none."""
    if REGION_LABEL in labels or ZONE_LABEL in labels or SUBZONE_LABEL in labels:
        region, zone, subzone = (labels.get(k, "") for k in (REGION_LABEL, ZONE_LABEL, SUBZONE_LABEL))
        return f"{region}/{zone}/{subzone}".rstrip("/")
    return locality_label(labels) or None


def workload_labels(proxy: Proxy, pod: Workload | None) -> Mapping[str, str]:
    """istiod SetWorkloadLabels: the labels before the proxy's own topology is added."""
    if proxy.metadata_labels.get(TEST_VM_LABEL) or pod is None:
        return proxy.metadata_labels
    # the pod's labels as the kube registry gives them (its locality as topology labels; the
    # network and cluster labels are the proxy's own below, as setTopologyLabels overwrites them)
    return {**proxy.static_labels, **augment_labels(pod.labels, "", pod.locality, "", "")}


def with_workload(proxy: Proxy, pod: Workload | None) -> Proxy:
    """The proxy with the labels and locality istiod computes for it (``pod``: the registry's
    Pod of that proxy, ``pod_key_by_proxy``; None when it knows none)."""
    labels = workload_labels(proxy, pod)
    located = locality_from_labels(labels)
    locality = proxy.node_locality if located is None else located
    labels = augment_labels(labels, proxy.cluster_id, locality, proxy.node_name, proxy.network)
    return dataclasses.replace(proxy, labels=labels, locality=locality)
