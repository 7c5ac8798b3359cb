# A site's own Drover worker, as a Nomad service job in that site: it
# runs only the calls to the site's storage and orchestrator (task queue
# "drover-site-SITE"), for plans whose site says `taskQueue:
# drover-site-SITE`. Run it in each site's own Nomad (a DR site has its
# own cluster: the other site's may be what is lost), when the central
# worker cannot reach the site's storage or orchestrator. Each site's is
# a job of its own, drover-site-worker-SITE, with its own Nomad Variable
# nomad/jobs/drover-site-worker-SITE, so that two sites' workers can run
# side by side in one cluster too (docs/guides/nomad-worker.md):
#
#   nomad var put -out none nomad/jobs/drover-site-worker-east @site-worker-east.nv.hcl
#   nomad job run -var site=east -var version=v1.4.0 \
#     -var worker_checksum=sha256:... drover-site-worker.nomad.hcl
#
# Every item of the job's Nomad Variable becomes an environment variable
# of the worker: the TEMPORAL_* connection settings and the site's
# storage secrets. A site worker runs no workflow, so it needs no plan
# keys. The worker comes from the release's archive for the clients'
# architecture, checked against its SHA-256 (from the release's
# SHA256SUMS) before it runs; nothing is assumed installed on the
# clients.

variable "site" {
  type        = string
  description = "the plan's name of this site"
}

variable "datacenters" {
  type        = list(string)
  default     = []
  description = "the site's datacenters; empty: the one named as the site"
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
  description = "the Drover release to run (v1.4.0): its worker archive is downloaded from release_url"
}

variable "worker_checksum" {
  type        = string
  default     = ""
  description = "the worker archive's checksum as the release's SHA256SUMS gives it, sha256:HEX; required unless worker_binary"
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
  description = "where Nomad downloads the worker archive instead of the release's (any artifact source: https://, s3::, ...)"
}

variable "worker_binary" {
  type        = string
  default     = ""
  description = "a path of the worker binary on the clients, run instead of downloading it (the exec driver's chroot holds /usr by default)"
}

variable "count" {
  type        = number
  default     = 2
  description = "how many workers of this site"
}

locals {
  id          = "drover-site-worker-${var.site}"
  datacenters = length(var.datacenters) > 0 ? var.datacenters : [var.site]
  archive     = var.worker_url != "" ? var.worker_url : "${var.release_url}/${var.version}/worker_${var.version}_linux_${var.arch}.tar.gz"
  # What downloading the worker needs and was not given.
  missing = var.worker_binary != "" ? [] : concat(var.worker_url == "" && var.version == "" ? ["version"] : [], var.worker_checksum == "" ? ["worker_checksum"] : [])
  # With something missing, `nomad job run` stops here, at this line
  # ("Invalid index"), before anything is placed: give -var version=...
  # and -var worker_checksum=sha256:... (or -var worker_binary=PATH).
  artifacts = { ok = var.worker_binary == "" ? [local.archive] : [] }[length(local.missing) == 0 ? "ok" : "set -var ${join(" and -var ", local.missing)}"]
}

job "drover-site-worker" {
  id          = local.id
  name        = local.id
  type        = "service"
  datacenters = local.datacenters

  # The archive downloaded is built for one architecture.
  constraint {
    attribute = "${attr.cpu.arch}"
    value     = var.arch
  }

  meta {
    site = var.site
  }

  group "worker" {
    count = var.count

    spread {
      attribute = "${node.unique.id}"
    }

    network {
      port "http" {}
    }

    # Out of the service catalog a moment before the worker is signalled.
    shutdown_delay = "5s"

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
      name     = "drover-site-worker"
      provider = "nomad"
      port     = "http"
      tags     = ["metrics", "site-${var.site}"]

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
        for_each = local.artifacts
        content {
          source      = artifact.value
          destination = "local/drover"
          options {
            checksum = var.worker_checksum
          }
        }
      }

      config {
        command = var.worker_binary != "" ? var.worker_binary : "${NOMAD_TASK_DIR}/drover/worker"
        args = [
          "--site", var.site,
          "--metrics", "${NOMAD_ADDR_http}",
          "--log-format", "json",
          "--identity", "${NOMAD_JOB_NAME}/${NOMAD_ALLOC_ID}",
          "--connect-timeout", "2m",
        ]
      }

      # See drover-worker.nomad.hcl: the client's max_kill_timeout
      # (30 s by default) caps kill_timeout.
      kill_signal  = "SIGTERM"
      kill_timeout = "5m"

      template {
        destination = "secrets/worker.env"
        env         = true
        change_mode = "restart"
        data        = <<-EOT
        {{- with nomadVar "nomad/jobs/${local.id}" }}{{ range $k, $v := . }}
        {{ $k }}={{ $v | toJSON }}
        {{- end }}{{ end }}
        EOT
      }

      resources {
        cpu        = 100
        memory     = 96
        memory_max = 192
      }
    }
  }
}
