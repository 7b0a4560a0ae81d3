{{/* Labels on every object. Pod templates and selectors carry only name and part-of, as the kustomize base does. */}}
{{- define "nodewise.labels" -}}
app.kubernetes.io/name: {{ .name }}
app.kubernetes.io/part-of: nodewise
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{- end -}}

{{/* Labels of objects that belong to no one component. */}}
{{- define "nodewise.commonLabels" -}}
app.kubernetes.io/part-of: nodewise
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* A component's image: (dict "root" . "image" .Values.<component>.image). repository@digest when a digest is set, else repository:tag (the component's tag, else image.tag, else appVersion). */}}
{{- define "nodewise.image" -}}
{{- if .image.digest -}}
{{ .image.repository }}@{{ .image.digest }}
{{- else -}}
{{ .image.repository }}:{{ .image.tag | default .root.Values.image.tag | default .root.Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/* A component's pull policy: its own, else image.pullPolicy. */}}
{{- define "nodewise.pullPolicy" -}}
{{ .image.pullPolicy | default .root.Values.image.pullPolicy }}
{{- end -}}

{{/* The ServiceAccount username of a nodewise component. */}}
{{- define "nodewise.sa" -}}
system:serviceaccount:{{ .root.Release.Namespace }}:{{ .name }}
{{- end -}}

{{- define "nodewise.podEnv" -}}
- name: POD_NAME
  valueFrom: {fieldRef: {fieldPath: metadata.name}}
- name: POD_NAMESPACE
  valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
{{- end -}}

{{- define "nodewise.restrictedContainer" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end -}}

{{- define "nodewise.restrictedPod" -}}
runAsNonRoot: true
runAsUser: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* Spread the replicas of a controller over nodes, so one drain or node loss leaves a replica. */}}
{{- define "nodewise.spread" -}}
affinity:
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          topologyKey: kubernetes.io/hostname
          labelSelector:
            matchLabels:
              app.kubernetes.io/name: {{ . }}
topologySpreadConstraints:
  - maxSkew: 1
    topologyKey: kubernetes.io/hostname
    whenUnsatisfiable: ScheduleAnyway
    labelSelector:
      matchLabels:
        app.kubernetes.io/name: {{ . }}
{{- end -}}

{{/* The hosts spec.gates.prometheus may query besides the cluster's Services (values gates). */}}
{{- define "nodewise.gateAddressArgs" -}}
{{- range .Values.gates.addressAllow }}
- --gate-address-allow={{ . }}
{{- end }}
{{- if ne .Values.gates.clusterDomain "cluster.local" }}
- --cluster-domain={{ .Values.gates.clusterDomain }}
{{- end }}
{{- end -}}
