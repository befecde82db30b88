{{- define "gpulens.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "gpulens.labels" -}}
app.kubernetes.io/part-of: gpulens
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "gpulens.exporter.selector" -}}
app.kubernetes.io/name: gpulens-exporter
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "gpulens.loadgen.selector" -}}
app.kubernetes.io/name: gpulens-loadgen
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "gpulens.dcgm.selector" -}}
app.kubernetes.io/name: {{ .Values.compat.dcgm.asDCGMExporter.name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
