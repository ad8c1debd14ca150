{{- /* pilotfish's own objects (Deployment, ServiceAccount, RBAC): pilotfish or pilotfish-REV */}}
{{- define "pilotfish.name" -}}
pilotfish{{- if .Values.revision }}-{{ .Values.revision }}{{- end }}
{{- end }}

{{- /* The value of istio.io/rev, as istiod's chart: the revision, "default" for none */}}
{{- define "pilotfish.revision" -}}
{{ .Values.revision | default "default" }}
{{- end }}

{{- /* What injected proxies reach: Istio's injection template puts istiod[-REV].NS.svc:15012 in
CA_ADDR, and istiod's chart makes it the mesh's discoveryAddress; the webhooks call it too. */}}
{{- define "pilotfish.service" -}}
istiod{{- if .Values.revision }}-{{ .Values.revision }}{{- end }}
{{- end }}

{{- define "pilotfish.labels" -}}
app: pilotfish
istio.io/rev: {{ include "pilotfish.revision" . | quote }}
app.kubernetes.io/name: pilotfish
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{- define "pilotfish.selector" -}}
app: pilotfish
istio.io/rev: {{ include "pilotfish.revision" . | quote }}
{{- end }}

{{- /* One webhook of the MutatingWebhookConfiguration (mutatingwebhook.yaml), as istiod's "core" */}}
{{- define "pilotfish.injector" }}
- name: {{ .prefix }}sidecar-injector.istio.io
  clientConfig:
    service:
      name: {{ .service }}
      namespace: {{ .namespace | quote }}
      path: /inject
      port: 443
    {{- with .caBundle }}
    caBundle: {{ . }}
    {{- end }}
  sideEffects: None
  rules:
  - operations: [CREATE]
    apiGroups: [""]
    apiVersions: [v1]
    resources: [pods]
  failurePolicy: Fail
  reinvocationPolicy: {{ .reinvocation }}
  admissionReviewVersions: [v1]
{{- end }}

{{- /* The injector webhooks of a revision or a tag (.rev): namespaces labelled istio.io/rev=.rev,
or pods so labelled in namespaces without either label (istiod's "rev." webhooks). .hook: the
pilotfish.injector values. */}}
{{- define "pilotfish.revisionInjectors" }}
{{- include "pilotfish.injector" (merge (dict "prefix" "rev.namespace.") .hook) }}
  namespaceSelector:
    matchExpressions:
    - {key: istio.io/rev, operator: In, values: [{{ .rev | quote }}]}
    - {key: istio-injection, operator: DoesNotExist}
  objectSelector:
    matchExpressions:
    - {key: sidecar.istio.io/inject, operator: NotIn, values: ["false"]}
{{- include "pilotfish.injector" (merge (dict "prefix" "rev.object.") .hook) }}
  namespaceSelector:
    matchExpressions:
    - {key: istio.io/rev, operator: DoesNotExist}
    - {key: istio-injection, operator: DoesNotExist}
  objectSelector:
    matchExpressions:
    - {key: sidecar.istio.io/inject, operator: NotIn, values: ["false"]}
    - {key: istio.io/rev, operator: In, values: [{{ .rev | quote }}]}
{{- end }}

{{- /* The default revision's injector webhooks (the revision "", or the tag "default"): namespaces
labelled istio-injection=enabled, pods labelled sidecar.istio.io/inject=true in unlabelled
namespaces, and with enableNamespacesByDefault every unlabelled pod of an unlabelled namespace. */}}
{{- define "pilotfish.defaultInjectors" }}
{{- include "pilotfish.injector" (merge (dict "prefix" "namespace.") .hook) }}
  namespaceSelector:
    matchExpressions:
    - {key: istio-injection, operator: In, values: [enabled]}
  objectSelector:
    matchExpressions:
    - {key: sidecar.istio.io/inject, operator: NotIn, values: ["false"]}
{{- include "pilotfish.injector" (merge (dict "prefix" "object.") .hook) }}
  namespaceSelector:
    matchExpressions:
    - {key: istio-injection, operator: DoesNotExist}
    - {key: istio.io/rev, operator: DoesNotExist}
  objectSelector:
    matchExpressions:
    - {key: sidecar.istio.io/inject, operator: In, values: ["true"]}
    - {key: istio.io/rev, operator: DoesNotExist}
{{- if .Values.sidecarInjectorWebhook.enableNamespacesByDefault }}
{{- include "pilotfish.injector" (merge (dict "prefix" "auto.") .hook) }}
  namespaceSelector:
    matchExpressions:
    - {key: istio-injection, operator: DoesNotExist}
    - {key: istio.io/rev, operator: DoesNotExist}
    - {key: kubernetes.io/metadata.name, operator: NotIn, values: [kube-system, kube-public, kube-node-lease, local-path-storage]}
  objectSelector:
    matchExpressions:
    - {key: sidecar.istio.io/inject, operator: DoesNotExist}
    - {key: istio.io/rev, operator: DoesNotExist}
{{- end }}
{{- end }}

{{- /* A revision tag's MutatingWebhookConfiguration name, as istiod's chart and istioctl name it */}}
{{- define "pilotfish.tagWebhook" -}}
istio-revision-tag-{{ .tag }}{{- if ne .namespace "istio-system" }}-{{ .namespace }}{{- end }}
{{- end }}

{{- /* The ports of the Service the proxies and the API server reach (istiod's) */}}
{{- define "pilotfish.servicePorts" -}}
- {name: grpc-xds, port: 15010, protocol: TCP}
{{- if .Values.pilot.ca.enabled }}
- {name: https-dns, port: 15012, protocol: TCP}
{{- end }}
- {name: https-webhook, port: 443, targetPort: 15017, protocol: TCP}
- {name: http-monitoring, port: 15014, protocol: TCP}
{{- end }}
