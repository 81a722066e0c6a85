{{/* The release's name for its objects, at most 63 characters. */}}
{{- define "share-worker.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "share-worker.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "share-worker.selector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: worker
{{- end -}}

{{- define "share-worker.scalerSelector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: scaler
{{- end -}}

{{- define "share-worker.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "share-worker.configMap" -}}
{{- .Values.existingConfigMap | default (include "share-worker.fullname" .) -}}
{{- end -}}

{{/* The TOML and the secrets it names, mounted read-only. */}}
{{- define "share-worker.volumeMounts" -}}
- name: config
  mountPath: /etc/share-worker
  readOnly: true
{{- range .Values.secretMounts }}
- name: secret-{{ .name }}
  mountPath: {{ .mountPath }}
  readOnly: true
{{- end }}
{{- end -}}

{{- define "share-worker.volumes" -}}
- name: config
  configMap:
    name: {{ include "share-worker.configMap" . }}
{{- range .Values.secretMounts }}
- name: secret-{{ .name }}
  secret:
    secretName: {{ .secretName }}
{{- end }}
{{- end -}}
