# Drover's central worker as a Nomad service job: it runs the workflows
# (task queue "drover") and the calls of every site without a worker of
# its own. Run it where it reaches Temporal and every site's storage and
# orchestrator; more than one instance is safe (Temporal hands each task
# to one worker), and two keep an action going when a node is lost: they
# share the record key (DROVER_RECORD_KEY, 32 bytes or more) with which
# they seal the changes they send to plans' records.
#
#   nomad var put -out none nomad/jobs/drover-worker @worker.nv.hcl
#   nomad job run -var 'datacenters=["east"]' \
#     -var 'builds={"v1.4.0"="sha256:..."}' drover-worker.nomad.hcl
#
# Every item of the Nomad Variable nomad/jobs/drover-worker but plan_keys
# becomes an environment variable of the worker: the TEMPORAL_*
# connection settings, and the storage secrets plans name with `secret:
# {env: PREFIX}`. plan_keys holds the public keys of the plan signers
# (PEM), written to a file the worker trusts. The job reads the variable
# through Nomad's workload identity; nothing secret is in this file
# (docs/guides/nomad-worker.md writes the variable without printing it).
#
# The worker comes from the release's archive for the clients'
# architecture, checked against its SHA-256 (from the release's
# SHA256SUMS) before it runs; nothing is assumed installed on the
# clients.
#
# Upgrades run the new build beside the old one (docs/guides/nomad-worker.md,
# "Upgrading"): give the builds as a map of version to that release's
# worker archive checksum, one group of workers per build
# (worker-VERSION, polling as build VERSION), and run the job again with
# both, then with the new one alone once nothing runs on the old. A group
# whose build stays in the map is left as it is:
#
#   nomad job run -var 'datacenters=["east"]' -var 'builds={"v1.4.0"="sha256:..."}' drover-worker.nomad.hcl
#   nomad job run -var 'datacenters=["east"]' -var 'builds={"v1.4.0"="sha256:...","v1.5.0"="sha256:..."}' drover-worker.nomad.hcl
#   temporal worker deployment set-current-version --deployment-name drover --build-id v1.5.0 --yes
#   nomad job run -var 'datacenters=["east"]' -var 'builds={"v1.5.0"="sha256:..."}' drover-worker.nomad.hcl
#
# A build's value may be a path of its worker binary on the clients
# instead of a checksum. Without builds it runs one group, "worker", of
# version under the build ID the binary gives itself; a new version
# there replaces the workers one by one, which strands the runs pinned to
# the old build.

variable "datacenters" {
  type        = list(string)
  description = "where the worker may run: the datacenters of the site (or third location) it lives in"
}

variable "driver" {
  type        = string
  default     = "exec"
  description = "task driver: exec isolates the worker binary; raw_exec where exec is not available"
}

# The worker binary: by default the release's archive of it for the
# clients' architecture (worker_VERSION_linux_ARCH.tar.gz, holding the
# binary as "worker", which keeps its executable mode), downloaded by
# Nomad as an artifact into the task's local/ directory and checked
# against worker_checksum before the task starts. worker_url names
# another place to download the same archive from (a mirror, s3::...);
# worker_binary a path on the clients instead, with no download.
variable "version" {
  type        = string
  default     = ""
  description = "the Drover release to run (v1.4.0): its worker archive is downloaded from release_url. Not used with builds"
}

variable "worker_checksum" {
  type        = string
  default     = ""
  description = "the worker archive's checksum as the release's SHA256SUMS gives it, sha256:HEX; required unless worker_binary or builds"
}

variable "arch" {
  type        = string
  default     = "amd64"
  description = "the clients' CPU architecture (amd64 or arm64): the archive downloaded is the one built for it, and only such clients run the job"
}

variable "release_url" {
  type        = string
  default     = "https://github.com/drover-dr/drover/releases/download"
  description = "where the releases are, one directory per version"
}

variable "worker_url" {
  type        = string
  default     = ""
  description = "where Nomad downloads the worker archive instead of the release's (any artifact source: https://, s3::, ...). Not used with builds"
}

variable "worker_binary" {
  type        = string
  default     = ""
  description = "a path of the worker binary on the clients, run instead of downloading it. Not used with builds"
}

variable "builds" {
  type        = map(string)
  default     = {}
  description = "the worker builds to run side by side, release version => its worker archive's checksum (sha256:HEX; or a path of that build's worker binary on the clients): a group of count workers each, worker-VERSION, polling as that build (--build-id VERSION). Empty: one group of version"
}

variable "count" {
  type        = number
  default     = 2
  description = "how many workers; each polls the same task queues"
}

locals {
  archive = var.worker_url != "" ? var.worker_url : "${var.release_url}/${var.version}/worker_${var.version}_linux_${var.arch}.tar.gz"
  # The group name's suffix ("" for the one group without builds) => the
  # build ID ("" for the binary's own), the binary on the clients ("" to
  # download it), the archive to download and its checksum.
  builds = length(var.builds) > 0 ? {
    for id, b in var.builds : "-${id}" => substr(b, 0, 7) == "sha256:" ?
    { id = id, binary = "", url = "${var.release_url}/${id}/worker_${id}_linux_${var.arch}.tar.gz", checksum = b } :
    { id = id, binary = b, url = "", checksum = "" }
  } : { "" = { id = "", binary = var.worker_binary, url = var.worker_binary == "" ? local.archive : "", checksum = var.worker_checksum } }
  # What downloading the one group's worker needs and was not given.
  missing = length(var.builds) > 0 || var.worker_binary != "" ? [] : concat(var.worker_url == "" && var.version == "" ? ["version"] : [], var.worker_checksum == "" ? ["worker_checksum"] : [])
  # With something missing, `nomad job run` stops here, at this line
  # ("Invalid index"), before anything is placed: give -var version=...
  # and -var worker_checksum=sha256:... (or builds, or worker_binary).
  checked = { ok = local.builds }[length(local.missing) == 0 ? "ok" : "set -var ${join(" and -var ", local.missing)}"]
}

job "drover-worker" {
  type        = "service"
  datacenters = var.datacenters

  # The archive downloaded is built for one architecture.
  constraint {
    attribute = "${attr.cpu.arch}"
    value     = var.arch
  }

  dynamic "group" {
    for_each = local.checked
    iterator = build
    labels   = ["worker${build.key}"]

    content {
      count = var.count

      # Spread instances over nodes: losing one node must not stop actions.
      spread {
        attribute = "${node.unique.id}"
      }

      network {
        port "http" {}
      }

      # Out of the service catalog a moment before the worker is signalled.
      shutdown_delay = "5s"

      # Counted healthy once /readyz answers: Temporal lists the worker
      # polling its task queues.
      update {
        max_parallel     = 1
        health_check     = "checks"
        min_healthy_time = "10s"
        healthy_deadline = "3m"
        auto_revert      = true
      }

      restart {
        attempts = 10
        interval = "5m"
        delay    = "5s"
        mode     = "delay"
      }

      service {
        name     = "drover-worker"
        provider = "nomad"
        port     = "http"
        tags     = ["metrics"]

        check {
          name     = "alive"
          type     = "http"
          path     = "/healthz"
          interval = "10s"
          timeout  = "2s"

          # A worker that stops answering for three checks in a row (about
          # 30 s) is restarted; /healthz answers from the process's start,
          # before Temporal does, so the grace is short.
          check_restart {
            limit = 3
            grace = "20s"
          }
        }

        check {
          name     = "ready"
          type     = "http"
          path     = "/readyz"
          interval = "10s"
          timeout  = "5s"
        }
      }

      task "worker" {
        driver = var.driver

        # The worker's archive, checked against its checksum (see above).
        dynamic "artifact" {
          for_each = build.value.url == "" ? [] : [build.value.url]
          content {
            source      = artifact.value
            destination = "local/drover"
            options {
              checksum = build.value.checksum
            }
          }
        }

        config {
          command = build.value.binary != "" ? build.value.binary : "${NOMAD_TASK_DIR}/drover/worker"
          args = concat([
            "--metrics", "${NOMAD_ADDR_http}",
            "--log-format", "json",
            "--identity", "${NOMAD_JOB_NAME}/${NOMAD_ALLOC_ID}",
            "--connect-timeout", "2m",
          ], build.value.id == "" ? [] : ["--build-id", build.value.id])
        }

        # On a stop or a new version, SIGTERM lets running calls finish
        # (the worker's --stop-timeout); Nomad waits as long, if the
        # client allows it: a client caps kill_timeout at its own
        # max_kill_timeout, 30 s unless its configuration raises it
        # (client { max_kill_timeout = "5m" }).
        kill_signal  = "SIGTERM"
        kill_timeout = "5m"

        template {
          destination = "secrets/worker.env"
          env         = true
          change_mode = "restart"
          data        = <<-EOT
        {{- with nomadVar "nomad/jobs/drover-worker" }}{{ range $k, $v := . }}{{ if ne $k "plan_keys" }}
        {{ $k }}={{ $v | toJSON }}
        {{- end }}{{ end }}{{ end }}
        EOT
        }

        template {
          destination = "secrets/plan-keys.pub"
          change_mode = "restart"
          data        = <<-EOT
        {{- with nomadVar "nomad/jobs/drover-worker" }}{{ .plan_keys }}{{ end }}
        EOT
        }

        env {
          DROVER_TRUSTED_PLAN_KEYS = "${NOMAD_SECRETS_DIR}/plan-keys.pub"
        }

        # From the worker's measured resident memory (docs/guides/deploy-nomad.md, "Running it
        # for real"): limits well above the peak, a hard ceiling beyond.
        resources {
          cpu        = 200
          memory     = 128
          memory_max = 256
        }
      }
    }
  }
}
