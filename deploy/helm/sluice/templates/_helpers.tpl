{{/* Names. */}}
{{- define "sluice.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "sluice.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Object names of the components. The release part is cut so that the
     longest name derived from each fits its limit, suffix included (a
     53-character release name, helm's maximum, works):
     - gateway: NAME-gateway-admin is a Service name (DNS label, 63);
     - model: a StatefulSet's pods carry the label
       controller-revision-hash=NAME-model-<hash of up to 10> (label value,
       63), so NAME-model stays within 52;
     - features: NAME-features is a Service name (63). */}}
{{- define "sluice.gateway" -}}{{ include "sluice.fullname" . | trunc 49 | trimSuffix "-" }}-gateway{{- end -}}
{{- define "sluice.model" -}}{{ include "sluice.fullname" . | trunc 46 | trimSuffix "-" }}-model{{- end -}}
{{- define "sluice.features" -}}{{ include "sluice.fullname" . | trunc 54 | trimSuffix "-" }}-features{{- end -}}
{{- define "sluice.secret" -}}{{ default (printf "%s-secrets" (include "sluice.fullname" .)) .Values.secrets.existingSecret }}{{- end -}}

{{- define "sluice.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "sluice.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "sluice.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* Labels: common ones, and the selector of a component (pass dict "root" $ "component" NAME). */}}
{{- define "sluice.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "sluice.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: sluice
{{- end -}}

{{- define "sluice.selector" -}}
app.kubernetes.io/name: {{ include "sluice.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "sluice.componentLabels" -}}
{{ include "sluice.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Labels of a pod template: the component's, without helm.sh/chart, so a
     chart version bump alone does not roll every pod. */}}
{{- define "sluice.podLabels" -}}
{{ include "sluice.selector" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: sluice
{{- end -}}

{{/* The environment every Sluice container gets: tokens, API keys, extra secret env. */}}
{{- define "sluice.secretEnv" -}}
- name: SLUICE_OPERATE_TOKEN
  valueFrom: {secretKeyRef: {name: {{ include "sluice.secret" . }}, key: operate-token}}
- name: SLUICE_READ_TOKEN
  valueFrom: {secretKeyRef: {name: {{ include "sluice.secret" . }}, key: read-token}}
{{- range $id, $_ := .Values.secrets.apiKeys }}
- name: {{ include "sluice.apiKeyEnv" $id }}
  valueFrom: {secretKeyRef: {name: {{ include "sluice.secret" $ }}, key: {{ printf "api-key-%s" $id | quote }}}}
{{- end }}
{{- range $name, $_ := .Values.secrets.env }}
- name: {{ $name }}
  valueFrom: {secretKeyRef: {name: {{ include "sluice.secret" $ }}, key: {{ $name | quote }}}}
{{- end }}
{{- end -}}

{{- define "sluice.apiKeyEnv" -}}
{{- printf "SLUICE_API_KEY_%s" (. | upper | replace "-" "_" | replace "." "_") -}}
{{- end -}}

{{/* The security section every component loads: the operate and read tokens, from the environment. */}}
{{- define "sluice.securityConfig" -}}
security:
  tokens:
    - {id: operator, token: "${SLUICE_OPERATE_TOKEN}", role: operate}
    - {id: reader, token: "${SLUICE_READ_TOKEN}", role: read}
{{- end -}}

{{/* Model-server endpoints, one per StatefulSet pod, through the headless Service. */}}
{{- define "sluice.modelEndpoints" -}}
{{- $root := .root -}}
{{- $port := .port -}}
{{- $eps := list -}}
{{- range $i := until (int $root.Values.modelServer.replicas) -}}
{{- $eps = append $eps (printf "%s-%d.%s.%s.svc:%d" (include "sluice.model" $root) $i (include "sluice.model" $root) $root.Release.Namespace (int $port)) -}}
{{- end -}}
{{- toJson $eps -}}
{{- end -}}

{{/* The sluice.yaml of the gateway pods. */}}
{{- define "sluice.gatewayConfig" -}}
{{- $gw := .Values.gateway -}}
{{- $backends := list -}}
{{- if .Values.modelServer.enabled -}}
{{- $backends = append $backends (dict "name" "models" "kind" "kserve_grpc" "endpoints" (include "sluice.modelEndpoints" (dict "root" . "port" .Values.modelServer.ports.grpc) | fromJsonArray)) -}}
{{- if $gw.proxy.enabled -}}
{{- $backends = append $backends (dict "name" "models-http" "kind" "kserve_http" "endpoints" (include "sluice.modelEndpoints" (dict "root" . "port" .Values.modelServer.ports.http) | fromJsonArray)) -}}
{{- end -}}
{{- end -}}
{{- $backends = concat $backends $gw.extraBackends -}}
{{- $forced := dict "listen" (printf ":%d" (int $gw.ports.http)) "admin" (printf ":%d" (int $gw.ports.admin)) "drain_period" (printf "%ds" (int $gw.drainSeconds)) "exit_timeout" (printf "%ds" (int $gw.exitTimeoutSeconds)) -}}
{{- if $gw.ports.grpc -}}
{{- $_ := set $forced "grpc" (printf ":%d" (int $gw.ports.grpc)) -}}
{{- end -}}
{{- if $backends -}}
{{- $_ := set $forced "backends" $backends -}}
{{- end -}}
{{- $defaults := dict "access_log" "stdout" "recording" (dict "dir" "/var/lib/sluice/recordings") -}}
{{- if and $gw.proxy.enabled .Values.modelServer.enabled -}}
{{- $_ := set $defaults "proxy" (dict "backend" "models-http" "path_prefix" $gw.proxy.pathPrefix "timeout" $gw.proxy.timeout) -}}
{{- end -}}
{{- $section := mustMergeOverwrite $defaults (deepCopy $gw.config) $forced -}}
{{- $cfg := dict "gateway" $section -}}
{{- if .Values.featureServer.enabled -}}
{{- $_ := set $cfg "feature_server" (dict "repo" "/etc/sluice/features" "address" "127.0.0.1" "port" (int .Values.featureServer.port) "read_auth" "open" "exit_timeout" (printf "%ds" (int $gw.exitTimeoutSeconds))) -}}
{{- end -}}
{{- with .Values.cluster.nats.url -}}
{{- $nats := dict "url" . -}}
{{- if $.Values.cluster.nats.credentialsSecret -}}
{{- $_ := set $nats "credentials" "/etc/sluice/nats/sluice.creds" -}}
{{- end -}}
{{- $_ := set $cfg "cluster" (dict "name" (default (include "sluice.fullname" $) $.Values.cluster.name) "nats" $nats) -}}
{{- end -}}
{{- $cfg = mustMergeOverwrite $cfg (deepCopy .Values.gateway.extraConfig) -}}
# sluice.yaml of the gateway pods, rendered by the Helm chart
# (docs/gateway-config.md describes every key).
{{ toYaml $cfg }}
{{ include "sluice.securityConfig" . }}
{{- end -}}

{{/* Pod-level settings shared by the components. */}}
{{- define "sluice.podCommon" -}}
serviceAccountName: {{ include "sluice.serviceAccountName" . }}
automountServiceAccountToken: false
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- end -}}

{{/* A Kubernetes quantity with a binary suffix (Ki, Mi, Gi, Ti) or none, in bytes. */}}
{{- define "sluice.quantityBytes" -}}
{{- $q := toString . -}}
{{- $n := $q -}}
{{- $mul := 1 -}}
{{- range $u, $m := dict "Ki" 1024 "Mi" 1048576 "Gi" 1073741824 "Ti" 1099511627776 -}}
{{- if hasSuffix $u $q -}}{{- $n = trimSuffix $u $q -}}{{- $mul = $m -}}{{- end -}}
{{- end -}}
{{- if not (regexMatch "^[0-9]+$" $n) -}}
{{- fail (printf "%q: want a whole number of bytes with Ki, Mi, Gi or Ti" $q) -}}
{{- end -}}
{{- mul (int64 $n) $mul -}}
{{- end -}}
