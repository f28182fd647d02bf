{{/* Labels every object of the release carries (selectors never use them). */}}
{{- define "gpu-orchestrator.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gpu-orchestrator
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{/* repository:tag, or repository@digest when a digest is given. */}}
{{- define "gpu-orchestrator.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/* Pod-spec fields shared by the three workloads: pass (dict "root" $ "c" .Values.X). */}}
{{- define "gpu-orchestrator.podPlacement" -}}
{{- with .c.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .c.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .c.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .c.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{- define "gpu-orchestrator.webhookSecretName" -}}
{{- if eq .Values.webhook.certificates.mode "certManager" -}}
{{ .Values.webhook.certificates.secretName | default "gpu-orchestrator-webhook-cert" }}
{{- else -}}
{{ .Values.webhook.certificates.secretName }}
{{- end -}}
{{- end -}}

{{/*
Objects copied from config/ (files/config, written by `python -m hack.charts`), as
they are but for the release's labels and namespace: namespaced objects and the
ServiceAccount subjects of bindings move to the release's namespace.
Pass (dict "root" $ "glob" "files/config/rbac/*.yaml").
*/}}
{{- define "gpu-orchestrator.copied" -}}
{{- $root := .root -}}
{{- range $path, $_ := $root.Files.Glob .glob }}
{{- range $doc := splitList "\n---\n" ($root.Files.Get $path) }}
{{- $obj := fromYaml $doc }}
{{- if and $obj $obj.kind }}
{{- $meta := $obj.metadata }}
{{- $_ := set $meta "labels" (merge (dict) ($meta.labels | default dict) (include "gpu-orchestrator.labels" $root | fromYaml)) }}
{{- if hasKey $meta "namespace" }}
{{- $_ := set $meta "namespace" $root.Release.Namespace }}
{{- end }}
{{- range $s := ($obj.subjects | default list) }}
{{- if eq $s.kind "ServiceAccount" }}
{{- $_ := set $s "namespace" $root.Release.Namespace }}
{{- end }}
{{- end }}
---
{{ toYaml $obj }}
{{- end }}
{{- end }}
{{- end }}
{{- end -}}
