# A site's own Drover worker, as a Nomad service job in that site: it
# runs only the calls to the site's storage and orchestrator (task queue
# "drover-site-SITE"), for plans whose site says `taskQueue:
# drover-site-SITE`. Run it in each site's own Nomad (a DR site has its
# own cluster: the other site's may be what is lost), when the central
# worker cannot reach the site's storage or orchestrator:
#
#   nomad var put nomad/jobs/drover-site-worker TEMPORAL_ADDRESS=temporal.example:7233 \
#     TEMPORAL_NAMESPACE=drover TEMPORAL_API_KEY=... DROVER_STORAGE_EAST_userID=...
#   nomad job run -var site=east drover-site-worker.nomad.hcl
#
# Every item of the Nomad Variable nomad/jobs/drover-site-worker becomes
# an environment variable of the worker: the TEMPORAL_* connection
# settings and the site's storage secrets. A site worker runs no
# workflow, so it needs no plan keys.

variable "site" {
  type        = string
  description = "the plan's name of this site"
}

variable "datacenters" {
  type        = list(string)
  default     = ["*"]
  description = "the site's datacenters"
}

variable "driver" {
  type        = string
  default     = "exec"
  description = "task driver: exec isolates the worker binary; raw_exec where exec is not available"
}

# The worker binary: either installed on every client that may run the
# job, at worker_binary (the exec driver's chroot holds /usr by default;
# a client whose chroot_env leaves it out needs the path inside it), or,
# with worker_url, downloaded by Nomad as an artifact into the task's
# local/ directory: an archive (.tar.gz) holding the binary as "worker",
# which keeps its executable mode (a bare file would arrive without it).
variable "worker_binary" {
  type        = string
  default     = "/usr/local/bin/worker"
  description = "path of Drover's worker binary on the clients (unused with worker_url)"
}

variable "worker_url" {
  type        = string
  default     = ""
  description = "where Nomad downloads an archive holding the worker binary as \"worker\" (any artifact source: https://, s3::, ...); empty: worker_binary on the clients"
}

variable "worker_checksum" {
  type        = string
  default     = ""
  description = "the archive's checksum, type:value (sha256:...); checked before the worker starts"
}

variable "count" {
  type        = number
  default     = 2
  description = "how many workers of this site"
}

job "drover-site-worker" {
  type        = "service"
  datacenters = var.datacenters

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

      # With worker_url, the worker comes as an artifact (see above).
      dynamic "artifact" {
        for_each = var.worker_url == "" ? [] : [var.worker_url]
        content {
          source      = artifact.value
          destination = "local/drover"
          dynamic "options" {
            for_each = var.worker_checksum == "" ? [] : [var.worker_checksum]
            content {
              checksum = options.value
            }
          }
        }
      }

      config {
        command = var.worker_url == "" ? var.worker_binary : "${NOMAD_TASK_DIR}/drover/worker"
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
        {{- with nomadVar "nomad/jobs/drover-site-worker" }}{{ range $k, $v := . }}
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
