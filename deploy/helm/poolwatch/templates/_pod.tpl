{{/*
What poolwatch adds to an engine pod, as named templates your own chart includes (README.md beside
values.yaml). Each takes this chart's context: from a parent chart that has poolwatch as a dependency,
(index .Subcharts "poolwatch"). The same pod as deploy/kubernetes/components/sidecar gives
(tests/deploy/test_helm_chart.py compares them).
*/}}

{{/* the pod template's labels: the PodMonitor selects poolwatch.io/sidecar, the sidecar reads its role */}}
{{- define "poolwatch.podLabels" -}}
poolwatch.io/sidecar: enabled
{{- end -}}

{{/* the pod's securityContext: the sidecar's group owns the shared volumes and reads the probe secret by group */}}
{{- define "poolwatch.podSecurityContext" -}}
fsGroup: {{ .Values.sidecar.fsGroup }}
fsGroupChangePolicy: OnRootMismatch
{{- end -}}

{{/* one item of the pod's initContainers: the native sidecar */}}
{{- define "poolwatch.sidecarContainer" -}}
- name: poolwatch
  image: {{ include "poolwatch.image" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  restartPolicy: Always
  ports:
    - name: metrics
      containerPort: {{ .Values.sidecar.port }}
      protocol: TCP
  env:
    - name: POOLWATCH_WORKER
      valueFrom:
        fieldRef:
          fieldPath: metadata.name
    - name: POOLWATCH_POD
      valueFrom:
        fieldRef:
          fieldPath: metadata.name
    - name: POOLWATCH_NAMESPACE
      valueFrom:
        fieldRef:
          fieldPath: metadata.namespace
    - name: POOLWATCH_ROLE
      valueFrom:
        fieldRef:
          fieldPath: metadata.labels['{{ .Values.sidecar.roleLabel }}']
    - name: POOLWATCH_PROBE_DIR
      value: {{ .Values.sidecar.probeDir }}
    - name: POOLWATCH_STATE_FILE
      value: {{ .Values.sidecar.stateFile }}
    - name: POOLWATCH_ALERTMANAGER_URLS
      value: {{ .Values.sidecar.alertmanagerUrls | quote }}
    {{- if ne (int .Values.sidecar.port) 9464 }}
    - name: POOLWATCH_PORT
      value: {{ .Values.sidecar.port | quote }}
    {{- end }}
    {{- if ne .Values.sidecar.logFormat "text" }}
    - name: POOLWATCH_LOG_FORMAT
      value: {{ .Values.sidecar.logFormat }}
    {{- end }}
    {{- if eq .Values.engine "vllm" }}
    - name: POOLWATCH_ENGINE
      value: vllm
    {{- end }}
    - name: POOLWATCH_METRICS_URLS
      value: {{ include "poolwatch.metricsUrls" . }}
    - name: POOLWATCH_LOG_PATHS
      value: {{ include "poolwatch.logPaths" . }}
    {{- with .Values.sidecar.extraEnv }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  startupProbe:
    httpGet:
      path: /healthz
      port: metrics
    periodSeconds: 1
    failureThreshold: 30
  livenessProbe:
    httpGet:
      path: /healthz
      port: metrics
    periodSeconds: 10
    timeoutSeconds: 2
    failureThreshold: 3
  readinessProbe:
    httpGet:
      path: /readyz
      port: metrics
    periodSeconds: 10
    timeoutSeconds: 2
    failureThreshold: 3
  resources:
    {{- toYaml .Values.sidecar.resources | nindent 4 }}
  securityContext:
    runAsNonRoot: true
    runAsUser: {{ .Values.sidecar.runAsUser }}
    runAsGroup: {{ .Values.sidecar.fsGroup }}
    readOnlyRootFilesystem: true
    allowPrivilegeEscalation: false
    capabilities:
      drop: ["ALL"]
    seccompProfile:
      type: RuntimeDefault
  volumeMounts:
    - name: poolwatch-probe
      mountPath: {{ include "poolwatch.probeMount" . }}
      readOnly: true
    - name: poolwatch-tmp
      mountPath: /tmp
    - name: {{ .Values.engine }}-logs
      mountPath: {{ include "poolwatch.logDir" . }}
      readOnly: true
{{- end -}}

{{/* items of the engine container's env: the probe's consent, its directory, the worker's name */}}
{{- define "poolwatch.engineEnv" -}}
- name: POOLWATCH_PROBE
  value: "1"
{{- if ne .Values.engine "vllm" }}
- name: SGLANG_PLUGINS
  value: poolwatch
{{- end }}
- name: POOLWATCH_PROBE_DIR
  value: {{ .Values.sidecar.probeDir }}
- name: POOLWATCH_WORKER
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
{{- end -}}

{{/* items of the engine container's volumeMounts: the probe's directory (read-write) and the log's */}}
{{- define "poolwatch.engineVolumeMounts" -}}
- name: poolwatch-probe
  mountPath: {{ include "poolwatch.probeMount" . }}
- name: {{ .Values.engine }}-logs
  mountPath: {{ include "poolwatch.logDir" . }}
{{- end -}}

{{/* items of the pod's volumes */}}
{{- define "poolwatch.volumes" -}}
- name: poolwatch-probe
  emptyDir:
    medium: Memory
    sizeLimit: 16Mi
- name: poolwatch-tmp
  emptyDir:
    medium: Memory
    sizeLimit: 16Mi
- name: {{ .Values.engine }}-logs
  emptyDir:
    sizeLimit: 2Gi
{{- end -}}
