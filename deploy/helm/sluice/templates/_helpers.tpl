{{- define "sluice.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "sluice.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "sluice.labels" -}}
{{ include "sluice.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "sluice.image" -}}
{{- $repo := required "image.repository is required: where you pushed the image of `make image` (docs/deploy.md)" .Values.image.repository -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" $repo .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repo (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* The sleep preStop action exists from Kubernetes 1.30. */}}
{{- define "sluice.preStopSleep" -}}
{{- $mode := .Values.preStop.mode -}}
{{- if not (has $mode (list "auto" "sleep" "none")) -}}
{{- fail (printf "preStop.mode %q: want auto, sleep or none" $mode) -}}
{{- end -}}
{{- if and (gt (int .Values.preStop.sleepSeconds) 0) (or (eq $mode "sleep") (and (eq $mode "auto") (semverCompare ">=1.30-0" .Capabilities.KubeVersion.Version))) -}}
true
{{- end -}}
{{- end -}}
