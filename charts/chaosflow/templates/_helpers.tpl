{{/* Chart name, cut to 63 characters (a DNS label). */}}
{{- define "chaosflow.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Base name of every resource: fullnameOverride, else "<release>-<chart>" (or just the release
     name when it already contains the chart name). */}}
{{- define "chaosflow.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "chaosflow.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Selector labels (immutable in a Deployment: never add to them). */}}
{{- define "chaosflow.selectorLabels" -}}
app.kubernetes.io/name: {{ include "chaosflow.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: controller
{{- end }}

{{/* Labels of every resource: the standard ones, then commonLabels (never overriding them). */}}
{{- define "chaosflow.labels" -}}
{{- $labels := dict
  "helm.sh/chart" (include "chaosflow.chart" .)
  "app.kubernetes.io/version" .Chart.AppVersion
  "app.kubernetes.io/part-of" "chaosflow"
  "app.kubernetes.io/managed-by" .Release.Service }}
{{- $labels = merge $labels (include "chaosflow.selectorLabels" . | fromYaml) (deepCopy (default (dict) .Values.commonLabels)) }}
{{- toYaml $labels }}
{{- end }}

{{/* chaosflow.labels plus extra maps, as one map without duplicate keys:
     `include "chaosflow.labelsWith" (list . $extra1 $extra2)`. The selector labels always win,
     then the extras in order, then the standard labels and commonLabels. */}}
{{- define "chaosflow.labelsWith" -}}
{{- $ctx := first . }}
{{- $labels := include "chaosflow.selectorLabels" $ctx | fromYaml }}
{{- range rest . }}
{{- $labels = merge $labels (deepCopy (default (dict) .)) }}
{{- end }}
{{- $labels = merge $labels (include "chaosflow.labels" $ctx | fromYaml) }}
{{- toYaml $labels }}
{{- end }}

{{- define "chaosflow.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "chaosflow.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "chaosflow.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
The rules the controller needs in every namespace it watches (docs/rbac.md), as a YAML list.
Used by the ClusterRole (all namespaces) and by the per-namespace Roles (watchNamespaces).
*/}}
{{- define "chaosflow.workloadRules" -}}
- apiGroups: ["chaosflow.io"]
  resources: ["workflows"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["chaosflow.io"]
  resources: ["workflows/status"]
  verbs: ["update", "patch"]
{{- if .Values.rbac.workflowFinalizers }}
- apiGroups: ["chaosflow.io"]
  resources: ["workflows/finalizers"]
  verbs: ["update"]
{{- end }}
{{- if .Values.rbac.cronWorkflows }}
- apiGroups: ["chaosflow.io"]
  resources: ["cronworkflows"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["chaosflow.io"]
  resources: ["cronworkflows/status"]
  verbs: ["update", "patch"]
{{- end }}
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- if .Values.rbac.tasks }}
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch", "create", "delete"]
- apiGroups: [""]
  resources: ["pods/log"]
  verbs: ["get"]
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", "create", "delete"]
{{- end }}
{{- range .Values.rbac.chaosTargets }}
- apiGroups: {{ toJson .apiGroups }}
  resources: {{ toJson .resources }}
  verbs: {{ toJson .verbs }}
{{- end }}
{{- end }}

{{/* Fails the render on settings that cannot work or would break least privilege. */}}
{{- define "chaosflow.validate" -}}
{{- range $i, $rule := .Values.rbac.chaosTargets }}
{{- range $field := list "apiGroups" "resources" "verbs" }}
{{- $items := get $rule $field }}
{{- if not (kindIs "slice" $items) }}
{{- fail (printf "rbac.chaosTargets[%d].%s must be a list" $i $field) }}
{{- end }}
{{- if and (ne $field "apiGroups") (empty $items) }}
{{- fail (printf "rbac.chaosTargets[%d].%s must not be empty" $i $field) }}
{{- end }}
{{- range $items }}
{{- if contains "*" (toString .) }}
{{- fail (printf "rbac.chaosTargets[%d].%s: %q: wildcards are not allowed (least privilege: name each one)" $i $field (toString .)) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- if and (gt (int .Values.replicas) 1) (not .Values.leaderElection.enabled) }}
{{- fail "replicas > 1 needs leaderElection.enabled (two leaders would run the same Workflows)" }}
{{- end }}
{{- if and .Values.leaderElection.enabled (ge (float64 .Values.leaderElection.renewDeadline) (float64 .Values.leaderElection.leaseDuration)) }}
{{- fail "leaderElection.renewDeadline must be shorter than leaderElection.leaseDuration" }}
{{- end }}
{{- end }}
