{{- define "gpu-scheduler-check.labels" -}}
app.kubernetes.io/name: gpu-scheduler-check
app.kubernetes.io/component: check
app.kubernetes.io/part-of: gpu-orchestrator
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{- define "gpu-scheduler-check.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/*
The gpu-scheduling-map annotation's text. The list form becomes one
"<podIndex>=<nodeName>:<devices>" line per entry, in podIndex order; an index below
replicaCount without an entry, or an index given twice, fails the render.
*/}}
{{- define "gpu-scheduler-check.map" -}}
{{- $m := .Values.gpuScheduling.schedulingMap -}}
{{- if kindIs "string" $m -}}
{{- range $n, $line := splitList "\n" $m -}}
{{- if and (trim $line) (not (regexMatch "^\\s*[0-9]+\\s*=\\s*[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?\\s*:\\s*[0-9]+(\\s*,\\s*[0-9]+)*\\s*$" $line)) -}}
{{- fail (printf "gpuScheduling.schedulingMap line %d %q: expected <index>=<node>:<dev>,<dev> (e.g. 0=node1:0,1)" (add1 $n) $line) -}}
{{- end -}}
{{- end -}}
{{ trim $m }}
{{- else -}}
{{- $byIndex := dict -}}
{{- range $e := $m -}}
{{- $i := toString (int64 $e.podIndex) -}}
{{- if hasKey $byIndex $i -}}
{{- fail (printf "gpuScheduling.schedulingMap: podIndex %s is given twice" $i) -}}
{{- end -}}
{{- $devs := $e.gpuDevices -}}
{{- if kindIs "slice" $devs -}}
{{- $list := list -}}
{{- range $devs }}{{ $list = append $list (toString (int64 .)) }}{{ end -}}
{{- $devs = join "," $list -}}
{{- else if or (kindIs "float64" $devs) (kindIs "int64" $devs) (kindIs "int" $devs) -}}
{{- $devs = toString (int64 $devs) -}}
{{- end -}}
{{- $_ := set $byIndex $i (printf "%s=%s:%s" $i $e.nodeName $devs) -}}
{{- end -}}
{{- range $i := until (int .Values.replicaCount) -}}
{{- if not (hasKey $byIndex (toString $i)) -}}
{{- fail (printf "gpuScheduling.schedulingMap has no entry for podIndex %d: pod %s-%d would never be placed (replicaCount is %d)" $i $.Values.name $i (int $.Values.replicaCount)) -}}
{{- end -}}
{{- end -}}
{{- $lines := list -}}
{{- $max := 0 -}}
{{- range $k, $_ := $byIndex }}{{ if gt (int $k) $max }}{{ $max = int $k }}{{ end }}{{ end -}}
{{- range $i := until (add1 $max | int) -}}
{{- with get $byIndex (toString $i) }}{{ $lines = append $lines . }}{{ end -}}
{{- end -}}
{{- join "\n" $lines -}}
{{- end -}}
{{- end -}}

{{/*
The seed's names of values this chart spells otherwise (a seed user's values file is
taken as it is): gpuScheduling.schedulerName is schedulerName, testService.logInterval
is logInterval. The seed's name is taken when the chart's own is at its default; both
given and different fail the render, naming the one to keep. gpuScheduling.enabled
true is what this chart always does; false is refused (the map is the chart's point).
*/}}
{{- define "gpu-scheduler-check.seedValue" -}}
{{- $seed := index . 0 -}}{{- $own := index . 1 -}}{{- $default := index . 2 -}}
{{- $seedName := index . 3 -}}{{- $ownName := index . 4 -}}
{{- if and (not (kindIs "invalid" $seed)) (ne (toString $seed) (toString $own)) (ne (toString $own) (toString $default)) -}}
{{- fail (printf "%s (the seed's name for %s) is %s and %s is %s: set %s only" $seedName $ownName (toJson $seed) $ownName (toJson $own) $ownName) -}}
{{- end -}}
{{- if kindIs "invalid" $seed }}{{ $own }}{{ else }}{{ $seed }}{{ end -}}
{{- end -}}

{{- define "gpu-scheduler-check.schedulerName" -}}
{{- if eq (toString .Values.gpuScheduling.enabled) "false" -}}
{{- fail "gpuScheduling.enabled=false: this chart's pods are always placed by the map; to run them without it, set schedulerName: default-scheduler (the map's annotation then only draws the webhook's warning)" -}}
{{- end -}}
{{- include "gpu-scheduler-check.seedValue" (list .Values.gpuScheduling.schedulerName .Values.schedulerName "gpu-scheduler" "gpuScheduling.schedulerName" "schedulerName") -}}
{{- end -}}

{{- define "gpu-scheduler-check.logInterval" -}}
{{- $seed := (.Values.testService | default dict).logInterval -}}
{{- include "gpu-scheduler-check.seedValue" (list $seed .Values.logInterval 10 "testService.logInterval" "logInterval") -}}
{{- end -}}

{{/* The live probe's bound: three log intervals and 10 s, in whole seconds. */}}
{{- define "gpu-scheduler-check.maxAge" -}}
{{- addf 10 (mulf 3 (include "gpu-scheduler-check.logInterval" . | float64)) | ceil | int -}}
{{- end -}}
