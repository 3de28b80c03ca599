{{/*
Gleaner's Leases, ServiceAccount names in the admission policies and the
scheduler's heartbeat lookup all live in gleaner-system, so the chart installs
there and nowhere else.
*/}}
{{- define "gleaner.namespace" -}}
{{- if ne .Release.Namespace "gleaner-system" -}}
{{- fail (printf "install Gleaner into the namespace gleaner-system (helm install -n gleaner-system --create-namespace), not %q: its Leases and admission policies name gleaner-system" .Release.Namespace) -}}
{{- end -}}
gleaner-system
{{- end -}}

{{/* A component's image (dict "root" . "image" .Values.X.image), pinned by digest when one is set. */}}
{{- define "gleaner.image" -}}
{{- $repo := printf "%s/%s" (trimSuffix "/" .root.Values.image.registry) .image.name -}}
{{- if .image.digest -}}
{{ $repo }}@{{ .image.digest }}
{{- else -}}
{{ $repo }}:{{ .root.Values.image.tag | default .root.Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/*
The priorities must sit on the right sides of the threshold, or best-effort
pods would not be reclaimed and inference pods would be.
*/}}
{{- define "gleaner.checkPriorities" -}}
{{- $t := int .Values.bestEffortPriorityThreshold -}}
{{- if ge (int .Values.priorityClasses.bestEffort) $t -}}
{{- fail (printf "priorityClasses.bestEffort (%d) must be below bestEffortPriorityThreshold (%d): pods of gleaner-best-effort are the ones Gleaner reclaims" (int .Values.priorityClasses.bestEffort) $t) -}}
{{- end -}}
{{- if lt (int .Values.priorityClasses.inference) $t -}}
{{- fail (printf "priorityClasses.inference (%d) must not be below bestEffortPriorityThreshold (%d): inference pods would be treated as best-effort" (int .Values.priorityClasses.inference) $t) -}}
{{- end -}}
{{- end -}}

{{/* Pod-level settings both Deployments share. */}}
{{- define "gleaner.podSpec" -}}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
{{- range . }}
- name: {{ . }}
{{- end }}
{{- end }}
{{- with .component.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .component.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
