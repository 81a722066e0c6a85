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

{{/*
The TOML and the secrets it names, mounted read-only. With a dict of the root context and
`scaler: true`, only the secretMounts the scaler may hold (those not marked `scaler: false`).
*/}}
{{- define "share-worker.volumeMounts" -}}
- name: config
  mountPath: /etc/share-worker
  readOnly: true
{{- range (include "share-worker.secretMounts" . | fromYamlArray) }}
- name: secret-{{ .name }}
  mountPath: {{ .mountPath }}
  readOnly: true
{{- end }}
{{- end -}}

{{- define "share-worker.volumes" -}}
- name: config
  configMap:
    name: {{ include "share-worker.configMap" .root }}
{{- range (include "share-worker.secretMounts" . | fromYamlArray) }}
- name: secret-{{ .name }}
  secret:
    secretName: {{ .secretName }}
{{- end }}
{{- end -}}

{{- define "share-worker.secretMounts" -}}
{{- $mounts := list }}
{{- range .root.Values.secretMounts }}
{{- if or (not $.scaler) (ne (toString .scaler) "false") }}
{{- $mounts = append $mounts . }}
{{- end }}
{{- end }}
{{- toYaml $mounts }}
{{- end -}}

{{/*
The checksum annotation: what the chart can see of the configuration. Secrets and an
existingConfigMap count by name only (their contents are not the chart's to read when it
renders); configChecksum is the operator's to bump when those change (docs/kubernetes.md).
*/}}
{{- define "share-worker.configChecksum" -}}
{{- $seen := dict "config" .Values.config "existingConfigMap" .Values.existingConfigMap "secretMounts" .Values.secretMounts "configChecksum" (toString .Values.configChecksum) }}
{{- toJson $seen | sha256sum }}
{{- end -}}

{{/* "true" when the chart renders its NetworkPolicies: networkPolicy.enabled, auto meaning scaler.enabled. */}}
{{- define "share-worker.networkPolicyOn" -}}
{{- $on := toString .Values.networkPolicy.enabled }}
{{- if eq $on "auto" }}
{{- .Values.scaler.enabled | toString }}
{{- else if or (eq $on "true") (eq $on "false") }}
{{- $on }}
{{- else }}
{{- fail (printf "networkPolicy.enabled: auto, true or false, not %q" $on) }}
{{- end }}
{{- end -}}

{{- define "share-worker.scalerKafkaSecret" -}}
{{- .Values.scaler.kafkaCredentials.existingSecret | default (printf "%s-scaler-kafka" (include "share-worker.fullname" .)) -}}
{{- end -}}

{{/* Where the scaler's own Secrets are mounted: beside the TOML's directory, never inside it. */}}
{{- define "share-worker.scalerTlsDir" -}}/etc/share-worker-scaler/tls{{- end -}}
{{- define "share-worker.scalerKafkaDir" -}}/etc/share-worker-scaler/kafka{{- end -}}
