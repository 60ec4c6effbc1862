{{/* The chart's names and the values every template derives from the engine. */}}

{{- define "poolwatch.labels" -}}
app.kubernetes.io/name: poolwatch
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "poolwatch.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* SGLang's API port 30000 (serving /metrics with --enable-metrics), vLLM's 8000 (always /metrics) */}}
{{- define "poolwatch.metricsUrls" -}}
{{ .Values.sidecar.metricsUrls | default (ternary "http://127.0.0.1:8000" "http://127.0.0.1:30000" (eq .Values.engine "vllm")) }}
{{- end -}}

{{- define "poolwatch.logDir" -}}
/var/log/{{ .Values.engine }}
{{- end -}}

{{- define "poolwatch.logPaths" -}}
{{ .Values.sidecar.logPaths | default (printf "/var/log/%s/%s.log" .Values.engine .Values.engine) }}
{{- end -}}

{{/* the probe's volume is mounted at the probe directory's parent: the probe makes the directory itself */}}
{{- define "poolwatch.probeMount" -}}
{{ dir .Values.sidecar.probeDir }}
{{- end -}}
