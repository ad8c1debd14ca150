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
