{{- define "pilotfish.name" -}}pilotfish{{- end }}

{{- define "pilotfish.labels" -}}
app: pilotfish
app.kubernetes.io/name: pilotfish
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{- define "pilotfish.selector" -}}
app: pilotfish
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}
