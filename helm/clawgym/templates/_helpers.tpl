{{/*
Shared helpers of the clawgym chart: names, labels, images, addresses, the CLAWGYM_* environment,
and the API versions that differ between Kubernetes 1.20 and current releases.
*/}}

{{- define "clawgym.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "clawgym.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "clawgym.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "clawgym.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* "<fullname>-<component>": the name of a component's workload and Service. Args: root, component. */}}
{{- define "clawgym.component" -}}
{{- printf "%s-%s" (include "clawgym.fullname" .root) .component | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "clawgym.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "clawgym.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: clawgym
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Selector labels of one component. Args: root, component. */}}
{{- define "clawgym.selectorLabels" -}}
app.kubernetes.io/name: {{ include "clawgym.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* All labels of one component's objects. Args: root, component. */}}
{{- define "clawgym.componentLabels" -}}
{{ include "clawgym.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* A component's image. Args: root, values (the component's values). */}}
{{- define "clawgym.image" -}}
{{- $img := .values.image -}}
{{- $tag := $img.tag | default .root.Values.image.tag | default .root.Chart.AppVersion -}}
{{- if $img.repository -}}
{{- printf "%s:%s" $img.repository $tag -}}
{{- else -}}
{{- printf "%s/%s%s:%s" .root.Values.image.registry .root.Values.image.namePrefix $img.name $tag -}}
{{- end -}}
{{- end -}}

{{/* The host other pods use to reach a component: its Service, or 127.0.0.1 under hostNetwork. Args: root, component. */}}
{{- define "clawgym.host" -}}
{{- if .root.Values.hostNetwork -}}127.0.0.1{{- else -}}{{ include "clawgym.component" . }}{{- end -}}
{{- end -}}

{{/* Every inference replica's address, comma-separated (inference.grpc_url → ReplicatedEngine):
     <fullname>-inference-N.<fullname>-inference:port, or on the host network 127.0.0.1:port+N. */}}
{{- define "clawgym.inferenceTargets" -}}
{{- $c := .Values.inference -}}
{{- $name := include "clawgym.component" (dict "root" . "component" "inference") -}}
{{- $targets := list -}}
{{- range $i := until (int $c.replicas) -}}
{{- if $.Values.hostNetwork -}}
{{- $targets = append $targets (printf "127.0.0.1:%d" (add (int $c.port) $i)) -}}
{{- else -}}
{{- $targets = append $targets (printf "%s-%d.%s:%v" $name $i $name $c.port) -}}
{{- end -}}
{{- end -}}
{{- join "," $targets -}}
{{- end -}}

{{- define "clawgym.sandboxNamespace" -}}
{{- .Values.orchestrator.sandbox.namespace | default (printf "%s-sandboxes" .Release.Namespace) -}}
{{- end -}}

{{/* The proxy URL as sandbox pods see it: fully qualified, since they live in another namespace. */}}
{{- define "clawgym.proxyUrlForSandboxes" -}}
{{- if .Values.hostNetwork -}}
http://127.0.0.1:{{ .Values.proxy.port }}
{{- else -}}
http://{{ include "clawgym.component" (dict "root" . "component" "proxy") }}.{{ .Release.Namespace }}.svc:{{ .Values.proxy.port }}
{{- end -}}
{{- end -}}

{{/* --- database, bus and the rpc secret -------------------------------------------------------- */}}

{{/* A Secret value: `given`, else the one already in the cluster under Secret `name` key `key`
     (kept across upgrades), else 32 random characters. Args: root, name, key, given. */}}
{{- define "clawgym.keptOrRandom" -}}
{{- if .given -}}
{{- .given -}}
{{- else -}}
{{- $existing := lookup "v1" "Secret" .root.Release.Namespace .name -}}
{{- if and $existing $existing.data (hasKey $existing.data .key) -}}
{{- index $existing.data .key | b64dec -}}
{{- else -}}
{{- randAlphaNum 32 -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "clawgym.rpcSecretName" -}}
{{- .Values.rpc.existingSecret | default (printf "%s-rpc" (include "clawgym.fullname" .)) -}}
{{- end -}}

{{/* The Secret holding Redis's password (key `password`), if any. */}}
{{- define "clawgym.redisSecretName" -}}
{{- if .Values.redis.enabled -}}
{{- .Values.redis.existingSecret | default (printf "%s-redis" (include "clawgym.fullname" .)) -}}
{{- else -}}
{{- .Values.externalRedis.existingSecret -}}
{{- end -}}
{{- end -}}

{{- define "clawgym.dbSecretName" -}}
{{- if .Values.postgresql.enabled -}}
{{- .Values.postgresql.existingSecret | default (printf "%s-db" (include "clawgym.fullname" .)) -}}
{{- else if .Values.externalDatabase.existingSecret -}}
{{- .Values.externalDatabase.existingSecret -}}
{{- else if .Values.externalDatabase.password -}}
{{- printf "%s-db" (include "clawgym.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* The SQLAlchemy URL without the password: psycopg takes it from PGPASSWORD (set from the Secret),
     so a password needs no URL escaping and never appears in a pod spec. */}}
{{- define "clawgym.storeUrl" -}}
{{- if .Values.postgresql.enabled -}}
postgresql+psycopg://{{ .Values.postgresql.username }}@{{ include "clawgym.host" (dict "root" . "component" "postgresql") }}:{{ .Values.postgresql.port }}/{{ .Values.postgresql.database }}
{{- else -}}
{{- $db := .Values.externalDatabase -}}
{{- if not $db.host -}}{{- fail "postgresql.enabled=false needs externalDatabase.host" -}}{{- end -}}
postgresql+psycopg://{{ $db.username }}@{{ $db.host }}:{{ $db.port }}/{{ $db.database }}{{ if $db.sslmode }}?sslmode={{ $db.sslmode }}{{ end }}
{{- end -}}
{{- end -}}

{{/* The bus URL; the bundled Redis's password comes from REDIS_PASSWORD, which "clawgym.env" sets
     from the Secret before it (Kubernetes expands $(VAR) of earlier entries): never in a pod spec. */}}
{{- define "clawgym.busUrl" -}}
{{- if .Values.redis.enabled -}}
redis://:$(REDIS_PASSWORD)@{{ include "clawgym.host" (dict "root" . "component" "redis") }}:{{ .Values.redis.port }}/0
{{- else -}}
{{- required "redis.enabled=false needs externalRedis.url" .Values.externalRedis.url -}}
{{- end -}}
{{- end -}}

{{/* The environment every clawgym component gets: the rpc secret, where the store, bus and the
     other services are, and their passwords (from Secrets). */}}
{{- define "clawgym.env" -}}
- name: CLAWGYM_RPC__SECRET
  valueFrom:
    secretKeyRef: {name: {{ include "clawgym.rpcSecretName" . }}, key: secret}
{{- $secret := include "clawgym.dbSecretName" . -}}
{{- if $secret }}
- name: PGPASSWORD
  valueFrom:
    secretKeyRef: {name: {{ $secret }}, key: password}
{{- end }}
{{- with include "clawgym.redisSecretName" . }}
- name: REDIS_PASSWORD
  valueFrom:
    secretKeyRef: {name: {{ . }}, key: password}
{{- end }}
- name: CLAWGYM_STORE__URL
  value: {{ include "clawgym.storeUrl" . | quote }}
- name: CLAWGYM_STORE__BUS_URL
  value: {{ include "clawgym.busUrl" . | quote }}
{{- range $name := list "store" "inference" "orchestrator" }}
{{- $c := index $.Values $name }}
{{- if $c.enabled }}
- name: CLAWGYM_{{ upper $name }}__GRPC_URL
  value: "{{ if eq $name "inference" }}{{ include "clawgym.inferenceTargets" $ }}{{ else }}{{ include "clawgym.host" (dict "root" $ "component" $name) }}:{{ $c.port }}{{ end }}"
{{- end }}
{{- end }}
{{- range $k, $v := .Values.extraEnv }}
- name: {{ $k }}
  value: {{ $v | quote }}
{{- end }}
{{- end -}}

{{/* A component's own env map as env entries. Args: the map. */}}
{{- define "clawgym.envMap" -}}
{{- range $k, $v := . }}
- name: {{ $k }}
  value: {{ $v | quote }}
{{- end }}
{{- end -}}

{{/* --- pods --------------------------------------------------------------------------------------- */}}

{{/* Pod-level settings shared by every clawgym pod. */}}
{{- define "clawgym.podCommon" -}}
{{- if .Values.hostNetwork }}
hostNetwork: true
dnsPolicy: ClusterFirstWithHostNet
{{- end }}
{{- with .Values.image.pullSecrets }}
imagePullSecrets:
{{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
{{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- end -}}

{{/* Prometheus scrape annotations plus the user's pod annotations. Args: root, port. */}}
{{- define "clawgym.podAnnotations" -}}
{{- if and .root.Values.metrics.annotations .port }}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .port | quote }}
prometheus.io/path: /metrics
{{- end }}
{{- with .root.Values.podAnnotations }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Scheduling of a component. Args: the component's values. */}}
{{- define "clawgym.scheduling" -}}
{{- with .nodeSelector }}
nodeSelector:
{{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations:
{{- toYaml . | nindent 2 }}
{{- end }}
{{- with .affinity }}
affinity:
{{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* Container resources, with nvidia.com/gpu added when gpus > 0. Args: the component's values. */}}
{{- define "clawgym.resources" -}}
{{- $res := deepCopy (.resources | default dict) -}}
{{- if gt (int (.gpus | default 0)) 0 -}}
{{- $limits := $res.limits | default dict -}}
{{- $_ := set $limits "nvidia.com/gpu" (int .gpus) -}}
{{- $_ := set $res "limits" $limits -}}
{{- end -}}
{{- toYaml $res -}}
{{- end -}}

{{/* --- API versions: what Kubernetes 1.20 lacks, chosen from the server's APIs and version (the
     version too, so that `helm template --kube-version 1.20.2` renders what 1.20 gets) ------------ */}}

{{- define "clawgym.pdb.apiVersion" -}}
{{- if and (.Capabilities.APIVersions.Has "policy/v1") (semverCompare ">=1.21-0" .Capabilities.KubeVersion.Version) -}}policy/v1{{- else -}}policy/v1beta1{{- end -}}
{{- end -}}

{{- define "clawgym.hpa.apiVersion" -}}
{{- if and (.Capabilities.APIVersions.Has "autoscaling/v2") (semverCompare ">=1.23-0" .Capabilities.KubeVersion.Version) -}}autoscaling/v2{{- else -}}autoscaling/v2beta2{{- end -}}
{{- end -}}

{{/* Readiness of a gRPC service: the standard grpc.health.v1 service every clawgym server answers
     (SERVING once it can work, NOT_SERVING from the start of shutdown), where the kubelet can ask
     it (1.24+); before that, a TCP connect. Liveness stays a TCP connect. Args: root, port. */}}
{{- define "clawgym.grpcReadiness" -}}
{{- if semverCompare ">=1.24-0" .root.Capabilities.KubeVersion.Version -}}
grpc: {port: {{ .port }}}
{{- else -}}
tcpSocket: {port: grpc}
{{- end -}}
{{- end -}}

{{/* A namespaceSelector for one namespace. The kubernetes.io/metadata.name label exists from 1.21;
     on older clusters the chart selects clawgym.dev/namespace, which it puts on the namespaces it
     creates (label the release namespace yourself there, README "Kubernetes versions"). Args: root, namespace. */}}
{{- define "clawgym.namespaceSelector" -}}
{{- if semverCompare ">=1.21-0" .root.Capabilities.KubeVersion.Version -}}
kubernetes.io/metadata.name: {{ .namespace }}
{{- else -}}
clawgym.dev/namespace: {{ .namespace }}
{{- end -}}
{{- end -}}

{{/* --- checkpoints: object store, shared PVC, hostPath or emptyDir -------------------------------- */}}

{{- define "clawgym.checkpoints.useVolume" -}}
{{- if not .Values.checkpoints.uri -}}true{{- end -}}
{{- end -}}

{{- define "clawgym.checkpoints.volume" -}}
- name: checkpoints
{{- if .Values.checkpoints.persistence.enabled }}
  persistentVolumeClaim:
    claimName: {{ .Values.checkpoints.persistence.existingClaim | default (printf "%s-checkpoints" (include "clawgym.fullname" .)) }}
{{- else if .Values.checkpoints.hostPath }}
  hostPath: {path: {{ .Values.checkpoints.hostPath }}, type: DirectoryOrCreate}
{{- else }}
  emptyDir: {}
{{- end }}
{{- end -}}

{{/* Env telling trainer and inference where checkpoints live. */}}
{{- define "clawgym.checkpoints.env" -}}
- name: CLAWGYM_TRAINER__CHECKPOINT_URI
  value: {{ .Values.checkpoints.uri | default "/data/checkpoints" | quote }}
{{- end -}}

{{- define "clawgym.checkpoints.envFrom" -}}
{{- with .Values.checkpoints.credentialsSecret }}
envFrom:
  - secretRef: {name: {{ . }}}
{{- end }}
{{- end -}}
