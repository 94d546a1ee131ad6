{{/*
Names and labels. Every object carries the recommended labels
(https://kubernetes.io/docs/concepts/overview/working-with-objects/common-labels/); selectors use
the stable subset (name, instance, component) only, since a selector cannot change on upgrade.
*/}}
{{- define "events-ingest.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "events-ingest.fullname" -}}
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

{{/* Name of one component's objects: <fullname>-<component> (api, encoder, rollup). */}}
{{- define "events-ingest.componentName" -}}
{{- printf "%s-%s" (include "events-ingest.fullname" .root | trunc 55 | trimSuffix "-") .component -}}
{{- end -}}

{{- define "events-ingest.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels of every object. */}}
{{- define "events-ingest.labels" -}}
helm.sh/chart: {{ include "events-ingest.chart" . }}
{{ include "events-ingest.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: events-ingest
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "events-ingest.selectorLabels" -}}
app.kubernetes.io/name: {{ include "events-ingest.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Labels of one component's objects; call with (dict "root" $ "component" "api"). */}}
{{- define "events-ingest.componentLabels" -}}
{{ include "events-ingest.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "events-ingest.componentSelectorLabels" -}}
{{ include "events-ingest.selectorLabels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "events-ingest.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "events-ingest.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* image: call with (dict "image" .Values.image "root" $). */}}
{{- define "events-ingest.image" -}}
{{- $tag := default .root.Chart.AppVersion .image.tag -}}
{{- if .image.digest -}}
{{- printf "%s@%s" .image.repository .image.digest -}}
{{- else -}}
{{- printf "%s:%s" .image.repository $tag -}}
{{- end -}}
{{- end -}}

{{/*
Pod Security Standard `restricted` (https://kubernetes.io/docs/concepts/security/pod-security-standards/):
non-root (the image's `node` user, uid 1000: runAsNonRoot needs a numeric uid to check, the
Dockerfile names the user), no privilege escalation, every capability dropped, RuntimeDefault
seccomp; and a read-only root filesystem, with emptyDirs where the product writes.
*/}}
{{- define "events-ingest.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ .Values.securityContext.runAsUser }}
runAsGroup: {{ .Values.securityContext.runAsGroup }}
fsGroup: {{ .Values.securityContext.runAsGroup }}
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "events-ingest.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ .Values.securityContext.runAsUser }}
runAsGroup: {{ .Values.securityContext.runAsGroup }}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
privileged: false
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* Where a process writes: /tmp (the rollup's and erasure's temporary Parquet files, Node's own) and DATA_DIR for STORE=fs. */}}
{{- define "events-ingest.volumes" -}}
- name: tmp
  emptyDir:
    sizeLimit: {{ .Values.tmpSizeLimit }}
{{- if eq .Values.store.type "fs" }}
- name: data
  persistentVolumeClaim:
    claimName: {{ required "store.fs.existingClaim: STORE=fs needs a ReadWriteMany claim every pod shares (the API lists and serves what the encoders write)" .Values.store.fs.existingClaim }}
{{- end }}
{{- if .Values.collections }}
- name: config
  configMap:
    name: {{ include "events-ingest.fullname" . }}-config
{{- end }}
{{- with .Values.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "events-ingest.volumeMounts" -}}
- name: tmp
  mountPath: /tmp
{{- if eq .Values.store.type "fs" }}
- name: data
  mountPath: {{ .Values.store.fs.dataDir }}
{{- end }}
{{- if .Values.collections }}
- name: config
  mountPath: /etc/events-ingest
  readOnly: true
{{- end }}
{{- with .Values.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* A secret reference as an env var; call with (dict "name" "ADMIN_TOKEN" "secret" "s" "key" "k"). */}}
{{- define "events-ingest.secretEnv" -}}
- name: {{ .name }}
  valueFrom:
    secretKeyRef:
      name: {{ .secret }}
      key: {{ .key }}
{{- end -}}

{{/* The Redis settings every process reads (shared/config.ts: REDIS_URL, REDIS_SENTINELS, REDIS_CLUSTER_NODES, QUEUE_*). */}}
{{- define "events-ingest.redisEnv" -}}
{{- $r := .Values.redis -}}
{{- if and $r.auth.existingSecret $r.auth.passwordKey }}
{{ include "events-ingest.secretEnv" (dict "name" "REDIS_PASSWORD" "secret" $r.auth.existingSecret "key" $r.auth.passwordKey) }}
{{- end }}
{{- if eq $r.mode "single" }}
{{- if and $r.auth.existingSecret $r.auth.urlKey }}
{{ include "events-ingest.secretEnv" (dict "name" "REDIS_URL" "secret" $r.auth.existingSecret "key" $r.auth.urlKey) }}
{{- else if and $r.auth.existingSecret $r.auth.passwordKey }}
{{- /* Kubernetes expands $(REDIS_PASSWORD) from the variable above: the password stays in the Secret. */}}
- name: REDIS_URL
  value: {{ regexReplaceAll "^(rediss?://)" $r.url "${1}:$(REDIS_PASSWORD)@" | quote }}
{{- else }}
- name: REDIS_URL
  value: {{ $r.url | quote }}
{{- end }}
{{- else if eq $r.mode "sentinel" }}
- name: REDIS_SENTINELS
  value: {{ join "," $r.sentinel.nodes | quote }}
- name: REDIS_SENTINEL_NAME
  value: {{ $r.sentinel.masterName | quote }}
{{- if and $r.auth.existingSecret $r.auth.sentinelPasswordKey }}
{{ include "events-ingest.secretEnv" (dict "name" "REDIS_SENTINEL_PASSWORD" "secret" $r.auth.existingSecret "key" $r.auth.sentinelPasswordKey) }}
{{- end }}
{{- else if eq $r.mode "cluster" }}
- name: REDIS_CLUSTER_NODES
  value: {{ join "," $r.cluster.nodes | quote }}
{{- end }}
- name: REDIS_WAIT_REPLICAS
  value: {{ $r.waitReplicas | quote }}
- name: QUEUE_NAME
  value: {{ .Values.queue.name | quote }}
- name: QUEUE_SHARDS
  value: {{ .Values.queue.shards | quote }}
{{- end -}}

{{/* The store and auth settings (secrets by reference only). */}}
{{- define "events-ingest.storeEnv" -}}
{{- $s := .Values.store -}}
- name: STORE
  value: {{ $s.type | quote }}
{{- if eq $s.type "s3" }}
- name: S3_BUCKET
  value: {{ required "store.s3.bucket is required with store.type=s3" $s.s3.bucket | quote }}
- name: S3_PREFIX
  value: {{ $s.s3.prefix | quote }}
- name: S3_REGION
  value: {{ $s.s3.region | quote }}
- name: S3_FORCE_PATH_STYLE
  value: {{ $s.s3.forcePathStyle | quote }}
{{- with $s.s3.endpoint }}
- name: S3_ENDPOINT
  value: {{ . | quote }}
{{- end }}
{{- with $s.s3.credentials.existingSecret }}
{{ include "events-ingest.secretEnv" (dict "name" "AWS_ACCESS_KEY_ID" "secret" . "key" $s.s3.credentials.accessKeyIdKey) }}
{{ include "events-ingest.secretEnv" (dict "name" "AWS_SECRET_ACCESS_KEY" "secret" . "key" $s.s3.credentials.secretAccessKeyKey) }}
{{- end }}
{{- else }}
- name: DATA_DIR
  value: {{ $s.fs.dataDir | quote }}
{{- end }}
{{- end -}}

{{/* Everything the three processes share; per-component env comes after (later entries win in Kubernetes). */}}
{{- define "events-ingest.commonEnv" -}}
{{ include "events-ingest.redisEnv" . }}
{{ include "events-ingest.storeEnv" . }}
- name: HOST
  value: "0.0.0.0"
- name: LOG_LEVEL
  value: {{ .Values.logLevel | quote }}
{{- if .Values.collections }}
- name: CONFIG_FILE
  value: /etc/events-ingest/config.json
{{- end }}
{{- with .Values.secrets.existingSecret }}
{{- if $.Values.secrets.erasureHashKeyKey }}
{{ include "events-ingest.secretEnv" (dict "name" "ERASURE_HASH_KEY" "secret" . "key" $.Values.secrets.erasureHashKeyKey) }}
{{- end }}
{{- end }}
{{- range $k, $v := .Values.env }}
- name: {{ $k }}
  value: {{ $v | toString | quote }}
{{- end }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
BullMQ key names of the batch queue, computed as the product computes them (shared/shards.ts
shardLayouts and shardTag, shared/bullmq-keys.ts): one shard on one Redis keeps BullMQ's default
prefix `bull` (keys `bull:<QUEUE_NAME>:wait`); otherwise shard k's prefix is the hash tag
`{<tag>}`, where the tag is `<QUEUE_NAME>:<k>` or `<QUEUE_NAME>:<k>:<j>` with the smallest j whose
Cluster slot lies in the k-th of QUEUE_SHARDS equal parts of the 16,384 slots. The slot is
CRC16-XMODEM of the tag modulo 16,384 (Redis Cluster's key slot; the tag has no braces inside).
test/integration/helm-chart.test.ts renders these names and compares them with shardLayouts().
*/}}

{{/* CRC16-XMODEM (polynomial 0x1021) by table; Go templates have no XOR, so bytes are XORed by nibble (x4: a*16+b -> a^b). */}}
{{- define "events-ingest.crc16" -}}
{{- $table := list 0 4129 8258 12387 16516 20645 24774 28903 33032 37161 41290 45419 49548 53677 57806 61935 4657 528 12915 8786 21173 17044 29431 25302 37689 33560 45947 41818 54205 50076 62463 58334 9314 13379 1056 5121 25830 29895 17572 21637 42346 46411 34088 38153 58862 62927 50604 54669 13907 9842 5649 1584 30423 26358 22165 18100 46939 42874 38681 34616 63455 59390 55197 51132 18628 22757 26758 30887 2112 6241 10242 14371 51660 55789 59790 63919 35144 39273 43274 47403 23285 19156 31415 27286 6769 2640 14899 10770 56317 52188 64447 60318 39801 35672 47931 43802 27814 31879 19684 23749 11298 15363 3168 7233 60846 64911 52716 56781 44330 48395 36200 40265 32407 28342 24277 20212 15891 11826 7761 3696 65439 61374 57309 53244 48923 44858 40793 36728 37256 33193 45514 41451 53516 49453 61774 57711 4224 161 12482 8419 20484 16421 28742 24679 33721 37784 41979 46042 49981 54044 58239 62302 689 4752 8947 13010 16949 21012 25207 29270 46570 42443 38312 34185 62830 58703 54572 50445 13538 9411 5280 1153 29798 25671 21540 17413 42971 47098 34713 38840 59231 63358 50973 55100 9939 14066 1681 5808 26199 30326 17941 22068 55628 51565 63758 59695 39368 35305 47498 43435 22596 18533 30726 26663 6336 2273 14466 10403 52093 56156 60223 64286 35833 39896 43963 48026 19061 23124 27191 31254 2801 6864 10931 14994 64814 60687 56684 52557 48554 44427 40424 36297 31782 27655 23652 19525 15522 11395 7392 3265 61215 65342 53085 57212 44955 49082 36825 40952 28183 32310 20053 24180 11923 16050 3793 7920 -}}
{{- $x4 := list 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 1 0 3 2 5 4 7 6 9 8 11 10 13 12 15 14 2 3 0 1 6 7 4 5 10 11 8 9 14 15 12 13 3 2 1 0 7 6 5 4 11 10 9 8 15 14 13 12 4 5 6 7 0 1 2 3 12 13 14 15 8 9 10 11 5 4 7 6 1 0 3 2 13 12 15 14 9 8 11 10 6 7 4 5 2 3 0 1 14 15 12 13 10 11 8 9 7 6 5 4 3 2 1 0 15 14 13 12 11 10 9 8 8 9 10 11 12 13 14 15 0 1 2 3 4 5 6 7 9 8 11 10 13 12 15 14 1 0 3 2 5 4 7 6 10 11 8 9 14 15 12 13 2 3 0 1 6 7 4 5 11 10 9 8 15 14 13 12 3 2 1 0 7 6 5 4 12 13 14 15 8 9 10 11 4 5 6 7 0 1 2 3 13 12 15 14 9 8 11 10 5 4 7 6 1 0 3 2 14 15 12 13 10 11 8 9 6 7 4 5 2 3 0 1 15 14 13 12 11 10 9 8 7 6 5 4 3 2 1 0 -}}
{{- $codes := dict "A" 65 "B" 66 "C" 67 "D" 68 "E" 69 "F" 70 "G" 71 "H" 72 "I" 73 "J" 74 "K" 75 "L" 76 "M" 77 "N" 78 "O" 79 "P" 80 "Q" 81 "R" 82 "S" 83 "T" 84 "U" 85 "V" 86 "W" 87 "X" 88 "Y" 89 "Z" 90 "a" 97 "b" 98 "c" 99 "d" 100 "e" 101 "f" 102 "g" 103 "h" 104 "i" 105 "j" 106 "k" 107 "l" 108 "m" 109 "n" 110 "o" 111 "p" 112 "q" 113 "r" 114 "s" 115 "t" 116 "u" 117 "v" 118 "w" 119 "x" 120 "y" 121 "z" 122 "0" 48 "1" 49 "2" 50 "3" 51 "4" 52 "5" 53 "6" 54 "7" 55 "8" 56 "9" 57 "_" 95 "-" 45 ":" 58 -}}
{{- $crc := 0 -}}
{{- range $c := splitList "" . -}}
{{- $b := get $codes $c -}}
{{- $hi := div $crc 256 -}}
{{- $i := add (mul (index $x4 (add (mul (div $hi 16) 16) (div $b 16))) 16) (index $x4 (add (mul (mod $hi 16) 16) (mod $b 16))) -}}
{{- $t := index $table $i -}}
{{- $a := mod $crc 256 -}}
{{- $th := div $t 256 -}}
{{- $crc = add (mul (add (mul (index $x4 (add (mul (div $a 16) 16) (div $th 16))) 16) (index $x4 (add (mul (mod $a 16) 16) (mod $th 16)))) 256) (mod $t 256) -}}
{{- end -}}
{{- $crc -}}
{{- end -}}

{{/* shardTag(queueName, index, count); call with (dict "queue" "q" "index" 0 "count" 3). */}}
{{- define "events-ingest.shardTag" -}}
{{- $lo := div (mul .index 16384) .count -}}
{{- $hi := div (mul (add .index 1) 16384) .count -}}
{{- $found := "" -}}
{{- range $j := until 100000 -}}
{{- $tag := ternary (printf "%s:%d" $.queue $.index) (printf "%s:%d:%d" $.queue $.index $j) (eq $j 0) -}}
{{- $slot := mod (include "events-ingest.crc16" $tag | atoi) 16384 -}}
{{- if and (ge $slot $lo) (lt $slot $hi) -}}
{{- $found = $tag -}}
{{- break -}}
{{- end -}}
{{- end -}}
{{- default (printf "%s:%d" .queue .index) $found -}}
{{- end -}}

{{/* The BullMQ prefix of every shard of the batch queue, as a YAML list (parse with fromYamlArray). */}}
{{- define "events-ingest.queuePrefixes" -}}
{{- $count := int .Values.queue.shards -}}
{{- if and (eq $count 1) (ne .Values.redis.mode "cluster") -}}
- "bull"
{{- else -}}
{{- range $i := until $count }}
- {{ printf "{%s}" (include "events-ingest.shardTag" (dict "queue" $.Values.queue.name "index" $i "count" $count)) | quote }}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
The keys that hold jobs not yet taken, as a YAML list of {name, key, type}: each shard's `wait`
list and `prioritized` zset (BullMQ 6: a job an encoder can take is in one of the two; a paused
queue keeps its jobs in `wait` too, so never pause the batch queue globally while KEDA reads it).
*/}}
{{- define "events-ingest.backlogKeys" -}}
{{- range $i, $p := include "events-ingest.queuePrefixes" . | fromYamlArray }}
- name: wait{{ $i }}
  key: {{ printf "%s:%s:wait" $p $.Values.queue.name | quote }}
  type: list
- name: prioritized{{ $i }}
  key: {{ printf "%s:%s:prioritized" $p $.Values.queue.name | quote }}
  type: zset
{{- end }}
{{- end -}}
