{{/* The chart's name, or nameOverride (63 characters at most: a DNS label). */}}
{{- define "pyserver.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's objects are named RELEASE-pyserver, or RELEASE where it
already holds the chart's name, or fullnameOverride. */}}
{{- define "pyserver.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "pyserver.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* A name for a second object of the release: fullname-SUFFIX, cut to fit. */}}
{{- define "pyserver.suffixed" -}}
{{- $base := include "pyserver.fullname" .root -}}
{{- printf "%s-%s" ($base | trunc (int (sub 62 (len .suffix))) | trimSuffix "-") .suffix -}}
{{- end -}}

{{- define "pyserver.selectorLabels" -}}
app.kubernetes.io/name: {{ include "pyserver.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "pyserver.labels" -}}
{{ include "pyserver.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end -}}

{{/* Where the server reads its models: the URI, or the PVC's mount. */}}
{{- define "pyserver.modelRepository" -}}
{{- if .Values.modelRepository.uri -}}
{{- .Values.modelRepository.uri -}}
{{- else -}}
{{- .Values.modelRepository.mountPath -}}
{{- end -}}
{{- end -}}

{{/* The claim the models are on: the named one, or the chart's own. */}}
{{- define "pyserver.claimName" -}}
{{- if .Values.modelRepository.pvc.claimName -}}
{{- .Values.modelRepository.pvc.claimName -}}
{{- else if .Values.modelRepository.pvc.create -}}
{{- include "pyserver.suffixed" (dict "root" . "suffix" "models") -}}
{{- end -}}
{{- end -}}

{{/* The Secret whose keys become the container's environment. */}}
{{- define "pyserver.credentialsSecret" -}}
{{- if .Values.modelRepository.credentials.existingSecret -}}
{{- .Values.modelRepository.credentials.existingSecret -}}
{{- else if .Values.modelRepository.credentials.env -}}
{{- include "pyserver.suffixed" (dict "root" . "suffix" "credentials") -}}
{{- end -}}
{{- end -}}

{{/* prometheus-adapter's rule for autoscaling.metricName: the queue time the
pod's requests spent in a window over the requests it answered in it (a
microsecond average per request; 0 when idle). */}}
{{- define "pyserver.adapterRule" -}}
{{- $w := .Values.prometheusAdapterRule.window -}}
- seriesQuery: 'nv_inference_queue_duration_us{namespace!="",pod!=""}'
  resources:
    overrides:
      namespace:
        resource: namespace
      pod:
        resource: pod
  name:
    matches: ^nv_inference_queue_duration_us$
    as: {{ .Values.autoscaling.metricName }}
  metricsQuery: 'sum(rate(nv_inference_queue_duration_us{<<.LabelMatchers>>}[{{ $w }}])) by (<<.GroupBy>>) / clamp_min(sum(rate(nv_inference_request_success{<<.LabelMatchers>>}[{{ $w }}])) by (<<.GroupBy>>), 1e-9)'
{{- end -}}
