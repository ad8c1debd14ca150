"""Sidecar injection as istiod does it (pkg/kube/inject): the injection policy, istiod's
templates rendered over the pod, the strategic merge of the result into the pod, istiod's post
processing, and the JSONPatch the webhook answers with; ``pilotfish kube-inject`` runs the same
pipeline over a manifest. Pure: no I/O, the templates and values are handed in."""
