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

{{/*
The labels every object carries: Kubernetes' recommended labels and Helm's
chart label. (dict "root" $ "component" "scheduler"). The Deployments'
selectors match app.kubernetes.io/name alone, gleaner-scheduler,
gleaner-controller or gleaner-console, as they always have: a selector
cannot change on upgrade. Everything else is named gleaner.
*/}}
{{- define "gleaner.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ ternary (printf "gleaner-%s" .component) "gleaner" (has .component (list "scheduler" "controller" "console")) }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/component: {{ .component }}
app.kubernetes.io/part-of: gleaner
{{- end -}}

{{/* imagePullSecrets, each {name: ...} or, as before, a plain name. */}}
{{- define "gleaner.imagePullSecrets" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
{{- range . }}
- name: {{ if kindIs "string" . }}{{ . }}{{ else }}{{ .name }}{{ end }}
{{- end }}
{{- end }}
{{- end -}}

{{/*
A pod template's metadata: the labels, and the component's podAnnotations
beside the chart's own (dict "root" $ "component" "scheduler" "values"
.Values.scheduler "annotations" (dict ...)).
*/}}
{{- define "gleaner.podMetadata" -}}
labels:
  {{- include "gleaner.labels" (dict "root" .root "component" .component) | nindent 2 }}
{{- $annotations := merge (deepCopy (.annotations | default dict)) (.values.podAnnotations | default dict) }}
{{- with $annotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/*
Pod-level settings every component takes from its values (dict "root" $
"component" "scheduler" "values" .Values.scheduler): priority class, pull
secrets, node selection and spread. Without an affinity of its own, a
component that runs replicas for failover prefers them on different nodes.
*/}}
{{- define "gleaner.podSpec" -}}
{{- /* Absent (values kept by helm upgrade --reuse-values from a chart
before the key) is not "": the scheduler and controller keep their class. */ -}}
{{- $priorityClass := ternary .values.priorityClassName (ne .component "console" | ternary "system-cluster-critical" "") (hasKey .values "priorityClassName") }}
{{- with $priorityClass }}
priorityClassName: {{ . }}
{{- end }}
{{- include "gleaner.imagePullSecrets" .root }}
{{- with .values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- if .values.affinity }}
affinity:
  {{- toYaml .values.affinity | nindent 2 }}
{{- else if ne .component "console" }}
affinity:
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels: {app.kubernetes.io/name: gleaner-{{ .component }}}
{{- end }}
{{- with .values.topologySpreadConstraints }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* RBAC subjects of a {groups: [...], users: [...]} value. */}}
{{- define "gleaner.subjects" -}}
{{- range .groups }}
- apiGroup: rbac.authorization.k8s.io
  kind: Group
  name: {{ . | quote }}
{{- end }}
{{- range .users }}
- apiGroup: rbac.authorization.k8s.io
  kind: User
  name: {{ . | quote }}
{{- end }}
{{- end -}}
