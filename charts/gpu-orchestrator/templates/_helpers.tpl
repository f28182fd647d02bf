{{/* The standard labels every object of the release carries (selectors never use
them): pass (dict "root" $ "component" "manager"), and "name" where it is not
gpu-orchestrator (the agent's objects: gpu-orchestrator-agent). config/ sets the same
name, component and part-of (its kustomizations' labels:). */}}
{{- define "gpu-orchestrator.labels" -}}
app.kubernetes.io/name: {{ .name | default "gpu-orchestrator" }}
app.kubernetes.io/component: {{ required "gpu-orchestrator.labels: component" .component }}
app.kubernetes.io/part-of: gpu-orchestrator
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" }}
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
{{- with .c.topologySpreadConstraints }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The Secret the webhook serves from, per webhook.certificates.mode. */}}
{{- define "gpu-orchestrator.webhookSecretName" -}}
{{- $c := .Values.webhook.certificates -}}
{{- if eq $c.mode "certManager" -}}
{{ $c.secretName | default "gpu-orchestrator-webhook-cert" }}
{{- else if eq $c.mode "secret" -}}
{{ $c.secretName }}
{{- else -}}
{{- /* selfSigned: the certificate Job's Secret; its Role names it, so it is fixed. */ -}}
gpu-orchestrator-webhook-certs
{{- end -}}
{{- end -}}

{{/*
Objects copied from config/ (files/config, written by `python -m hack.charts`), as
they are but for the release's labels and namespace: namespaced objects, the
ServiceAccount subjects of bindings and the service-account user names of the
admission policies' CEL (system:serviceaccount:gpu-orchestrator-system:...) move to
the release's namespace.
Pass (dict "root" $ "glob" "files/config/rbac/*.yaml" "component" "rbac"), "name"
where the labels' name is not gpu-orchestrator, and optionally "skip": a list of
kinds ("Job") or kind/name ("ClusterRoleBinding/x") left out.
*/}}
{{- define "gpu-orchestrator.copied" -}}
{{- $root := .root -}}
{{- $skip := .skip | default list -}}
{{- $sa := printf "system:serviceaccount:%s:" $root.Release.Namespace -}}
{{- range $path, $_ := $root.Files.Glob .glob }}
{{- $text := $root.Files.Get $path | replace "system:serviceaccount:gpu-orchestrator-system:" $sa }}
{{- range $doc := splitList "\n---\n" $text }}
{{- $obj := fromYaml $doc }}
{{- if and $obj $obj.kind }}
{{- if not (or (has $obj.kind $skip) (has (printf "%s/%s" $obj.kind $obj.metadata.name) $skip)) }}
{{- $meta := $obj.metadata }}
{{- $_ := set $meta "labels" (merge (dict) ($meta.labels | default dict) (include "gpu-orchestrator.labels" (dict "root" $root "component" $.component "name" $.name) | fromYaml)) }}
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
{{- end }}
{{- end -}}

{{/* The pod spec of the certificate Job and of its CronJob's jobs
(config/webhook/certs_job.yaml): `main.py webhook-certs`, then exit. */}}
{{- define "gpu-orchestrator.certsPodTemplate" -}}
{{- $w := .Values.webhook -}}
metadata:
  labels:
    app.kubernetes.io/name: gpu-orchestrator
    app.kubernetes.io/component: webhook-certs
spec:
  serviceAccountName: gpu-orchestrator-webhook-certs
  restartPolicy: OnFailure
  securityContext:
    {{- toYaml $w.podSecurityContext | nindent 4 }}
  {{- /* Not the webhook's priority class or spread: a Job that runs once a day. */}}
  {{- with include "gpu-orchestrator.podPlacement" (dict "root" . "c" (omit $w "priorityClassName" "topologySpreadConstraints")) | trim }}{{ . | nindent 2 }}{{- end }}
  containers:
  - name: certs
    image: {{ include "gpu-orchestrator.image" . }}
    imagePullPolicy: {{ .Values.image.pullPolicy }}
    args:
    - webhook-certs
    - --namespace=$(POD_NAMESPACE)
    - --cert-validity-days={{ $w.certificates.validityDays }}
    env:
    - name: POD_NAMESPACE
      valueFrom:
        fieldRef:
          fieldPath: metadata.namespace
    resources:
      {{- toYaml $w.certificates.jobResources | nindent 6 }}
    securityContext:
      {{- toYaml $w.securityContext | nindent 6 }}
{{- end -}}
