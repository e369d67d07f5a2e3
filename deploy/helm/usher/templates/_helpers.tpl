{{/* The prefix of every object's name: <release>-usher, or the release's
name when it already says usher. */}}
{{- define "usher.fullname" -}}
{{- if contains "usher" .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-usher" .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "usher.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/name: usher
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Selects one service's pods: call with (dict "root" $ "service" "gateway"). */}}
{{- define "usher.selectorLabels" -}}
app.kubernetes.io/name: usher
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .service }}
{{- end -}}

{{- define "usher.componentLabels" -}}
{{ include "usher.labels" .root }}
app.kubernetes.io/component: {{ .service }}
{{- end -}}

{{/* The image of a service (or of usherctl): <repository>-<service>:<tag>. */}}
{{- define "usher.image" -}}
{{- printf "%s-%s:%s" .root.Values.image.repository .service (.root.Values.image.tag | default .root.Chart.AppVersion) -}}
{{- end -}}

{{- define "usher.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- .Values.serviceAccount.name | default (include "usher.fullname" .) -}}
{{- else -}}
{{- .Values.serviceAccount.name | default "default" -}}
{{- end -}}
{{- end -}}

{{/* The Secret of one service's credentials, or of "keys" / "migrate". */}}
{{- define "usher.secretName" -}}
{{- $s := index .root.Values.secrets .service -}}
{{- $s.name | default (printf "%s-%s" (include "usher.fullname" .root) .service) -}}
{{- end -}}

{{/* What every service's pod has: its account, security context and
placement. */}}
{{- define "usher.podSpec" -}}
serviceAccountName: {{ include "usher.serviceAccountName" . }}
automountServiceAccountToken: {{ .Values.serviceAccount.automountToken }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The broker, Redis and logging settings every service reads
(docs/configuration.md#every-service), with its own NKey and Redis
password as files from its Secret. */}}
{{- define "usher.commonEnv" -}}
- name: USHER_NATS_URL
  value: {{ .root.Values.nats.url | quote }}
- name: USHER_NATS_NKEY_FILE
  value: /run/usher/credentials/nats.nk
- name: USHER_STREAM_REPLICAS
  value: {{ .root.Values.nats.streamReplicas | quote }}
- name: USHER_REDIS_URL
  value: {{ .root.Values.redis.url | quote }}
- name: USHER_REDIS_USER
  value: {{ printf "usher-%s" .service | quote }}
- name: USHER_REDIS_PASSWORD_FILE
  value: /run/usher/credentials/redis.pass
{{- with .root.Values.redis.addrMap }}
- name: USHER_REDIS_ADDR_MAP
  value: {{ . | quote }}
{{- end }}
- name: USHER_LOG_LEVEL
  value: {{ .root.Values.logLevel | quote }}
{{- end -}}

{{/* The service's PostgreSQL role's URL, from its Secret. */}}
{{- define "usher.databaseEnv" -}}
- name: USHER_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "usher.secretName" . }}
      key: database-url
{{- end -}}

{{/* Any other variable: every service's `extraEnv`, then the service's
own `env`. Call with (dict "root" $ "service" "gateway"). */}}
{{- define "usher.extraEnv" -}}
{{- range $name, $value := .root.Values.extraEnv }}
- name: {{ $name }}
  value: {{ $value | quote }}
{{- end }}
{{- range $name, $value := (index .root.Values .service).env }}
- name: {{ $name }}
  value: {{ $value | quote }}
{{- end }}
{{- end -}}

{{/* More files for every service (a CA for NATS or Redis TLS, the user
JWT secret, the page's languages): extraVolumes and extraVolumeMounts. */}}
{{- define "usher.extraMounts" -}}
{{- with .Values.extraVolumeMounts }}{{ toYaml . }}{{ end -}}
{{- end -}}

{{- define "usher.extraVolumes" -}}
{{- with .Values.extraVolumes }}{{ toYaml . }}{{ end -}}
{{- end -}}

{{- define "usher.credentialsMount" -}}
- name: credentials
  mountPath: /run/usher/credentials
  readOnly: true
{{- end -}}

{{/* Only the NKey seed and the Redis password become files; the URL and
the token stay variables. */}}
{{- define "usher.credentialsVolume" -}}
- name: credentials
  secret:
    secretName: {{ include "usher.secretName" . }}
    defaultMode: 0440
    items:
      - {key: nats.nk, path: nats.nk}
      - {key: redis.pass, path: redis.pass}
{{- end -}}

{{/* /healthz and /readyz on the named port: call with (dict "root" $ "port" "ops").
A service listens only once it has reached NATS and Redis and found the
streams the admitter declares, so the startup probe, not the liveness
probe, covers that wait. */}}
{{- define "usher.probes" -}}
startupProbe:
  httpGet: {path: /healthz, port: {{ .port }}}
  {{- toYaml .root.Values.probes.startup | nindent 2 }}
livenessProbe:
  httpGet: {path: /healthz, port: {{ .port }}}
  {{- toYaml .root.Values.probes.liveness | nindent 2 }}
readinessProbe:
  httpGet: {path: /readyz, port: {{ .port }}}
  {{- toYaml .root.Values.probes.readiness | nindent 2 }}
{{- end -}}

{{/* USHER_VERIFY_KEY_FILES: the older keys' paths beside signing.key. */}}
{{- define "usher.verifyKeyFiles" -}}
{{- $paths := list -}}
{{- range . }}{{ $paths = append $paths (printf "/run/usher/keys/%s" .) }}{{ end -}}
{{- join "," $paths -}}
{{- end -}}
