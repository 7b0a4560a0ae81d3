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

{{/* A component's image: (dict "root" . "image" .Values.<component>.image). repository:tag (the component's tag, else image.tag, else appVersion), then @digest when a digest is set: the runtime pulls the digest, the tag says which release it is. */}}
{{- define "nodewise.image" -}}
{{ .image.repository }}:{{ .image.tag | default .root.Values.image.tag | default .root.Chart.AppVersion }}
{{- with .image.digest }}@{{ . }}{{ end -}}
{{- end -}}

{{/* A component's pull policy: its own, else image.pullPolicy. */}}
{{- define "nodewise.pullPolicy" -}}
{{ .image.pullPolicy | default .root.Values.image.pullPolicy }}
{{- end -}}

{{/* The ServiceAccount username of a nodewise component in the release namespace. */}}
{{- define "nodewise.sa" -}}
system:serviceaccount:{{ .root.Release.Namespace }}:{{ .name }}
{{- end -}}

{{/* The node agents' namespace (agent.namespace), which must not be the release namespace: the agents need Pod Security level privileged, every other nodewise pod passes restricted. */}}
{{- define "nodewise.agentNamespace" -}}
{{- if eq .Values.agent.namespace .Release.Namespace -}}
{{- fail (printf "agent.namespace %q is the release namespace: the node agents need Pod Security level privileged and the controllers run restricted, so the agents need a namespace of their own (default nodewise-agent)" .Values.agent.namespace) -}}
{{- end -}}
{{- .Values.agent.namespace -}}
{{- end -}}

{{/* Pod Security admission labels of a namespace the chart creates: (dict "level" "restricted"|"privileged"). enforce refuses a pod above the level; audit and warn report it. */}}
{{- define "nodewise.podSecurityLabels" -}}
pod-security.kubernetes.io/enforce: {{ .level }}
pod-security.kubernetes.io/audit: {{ .level }}
pod-security.kubernetes.io/warn: {{ .level }}
{{- end -}}

{{/* The controllers' env: POD_NAME (their Lease identity), POD_NAMESPACE (the Leases' namespace), POD_IP (with the metrics port, where a standby follows the leader: --advertise-address). */}}
{{- define "nodewise.podEnv" -}}
- name: POD_NAME
  valueFrom: {fieldRef: {fieldPath: metadata.name}}
- name: POD_NAMESPACE
  valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
- name: POD_IP
  valueFrom: {fieldRef: {fieldPath: status.podIP}}
{{- end -}}

{{/*
Extra pod-template metadata of a workload: (dict "root" . "c" .Values.<component>).
The global podLabels/podAnnotations, then the component's (which win). The
labels the selectors use (name, part-of) cannot be overridden.
*/}}
{{- define "nodewise.podLabels" -}}
{{- $m := merge (deepCopy (.c.podLabels | default dict)) (deepCopy (.root.Values.podLabels | default dict)) -}}
{{- with omit $m "app.kubernetes.io/name" "app.kubernetes.io/part-of" }}{{ toYaml . }}{{ end -}}
{{- end -}}

{{- define "nodewise.podAnnotations" -}}
{{- $m := merge (deepCopy (.c.podAnnotations | default dict)) (deepCopy (.root.Values.podAnnotations | default dict)) -}}
{{- with $m }}{{ toYaml . }}{{ end -}}
{{- end -}}

{{/* A workload's imagePullSecrets: the component's own (the probe's, which lives in its own namespace), else the global imagePullSecrets. */}}
{{- define "nodewise.imagePullSecrets" -}}
{{- with (.c.imagePullSecrets | default .root.Values.imagePullSecrets) }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* Spread the replicas of a controller over nodes, so one drain or node loss leaves a replica. */}}
{{/* (dict "name" <app> "affinity" .Values.<component>.affinity): the component's affinity replaces the default anti-affinity when set. */}}
{{- define "nodewise.spread" -}}
affinity:
{{- if .affinity }}
  {{- toYaml .affinity | nindent 2 }}
{{- else }}
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          topologyKey: kubernetes.io/hostname
          labelSelector:
            matchLabels:
              app.kubernetes.io/name: {{ .name }}
{{- end }}
topologySpreadConstraints:
  - maxSkew: 1
    topologyKey: kubernetes.io/hostname
    whenUnsatisfiable: ScheduleAnyway
    labelSelector:
      matchLabels:
        app.kubernetes.io/name: {{ .name }}
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

{{/* The DaemonSets a pre-pull pod may pull for (dataPlane's, the NodeRollout's default targets by default): one ValidatingAdmissionPolicyBinding each (orchestrator-prepull.yaml), named in nodewise-surge-bridge-labelled. */}}
{{- define "nodewise.prepullTargets" -}}
{{- concat .Values.dataPlane.istioCNI .Values.dataPlane.ztunnel | uniq | join " " -}}
{{- end -}}

{{/* A container's resources: (dict "root" . "component" "orchestrator" "c" .Values.orchestrator). clusterSize's preset from files/sizing.yaml, with every key the component's own resources set winning. */}}
{{- define "nodewise.resources" -}}
{{- $preset := get (.root.Files.Get "files/sizing.yaml" | fromYaml) .root.Values.clusterSize -}}
{{- if not $preset }}{{ fail (printf "clusterSize %q: want small, medium or large" .root.Values.clusterSize) }}{{ end -}}
{{- toYaml (mustMergeOverwrite (deepCopy (get $preset .component)) (deepCopy (.c.resources | default dict))) -}}
{{- end -}}
