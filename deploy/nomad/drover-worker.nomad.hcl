# Drover's central worker as a Nomad service job: it runs the workflows
# (task queue "drover") and the calls of every site without a worker of
# its own. Run it where it reaches Temporal and every site's storage and
# orchestrator; more than one instance is safe (Temporal hands each task
# to one worker), and two keep an action going when a node is lost: they
# share the record key (DROVER_RECORD_KEY, 32 bytes or more) with which
# they seal the changes they send to plans' records.
#
#   nomad var put nomad/jobs/drover-worker TEMPORAL_ADDRESS=temporal.example:7233 \
#     TEMPORAL_NAMESPACE=drover TEMPORAL_API_KEY=... DROVER_STORAGE_EAST_userID=... \
#     DROVER_RECORD_KEY="$(head -c 32 /dev/urandom | base64)" plan_keys=@plan-signing.pub
#   nomad job run drover-worker.nomad.hcl
#
# Every item of the Nomad Variable nomad/jobs/drover-worker but plan_keys
# becomes an environment variable of the worker: the TEMPORAL_*
# connection settings, and the storage secrets plans name with `secret:
# {env: PREFIX}`. plan_keys holds the public keys of the plan signers
# (PEM), written to a file the worker trusts. The job reads the variable
# through Nomad's workload identity; nothing secret is in this file.
#
# Upgrades run the new build beside the old one (README, "Upgrading"):
# give the builds as a map of build ID to the path of that build's worker
# binary, one group of workers per build (worker-BUILD), and run the job
# again with both, then with the new one alone once nothing runs on the
# old. A group whose build stays in the map is left as it is:
#
#   nomad job run -var 'builds={"1.4.0"="/opt/drover/1.4.0/worker"}' drover-worker.nomad.hcl
#   nomad job run -var 'builds={"1.4.0"="/opt/drover/1.4.0/worker","1.5.0"="/opt/drover/1.5.0/worker"}' drover-worker.nomad.hcl
#   temporal worker deployment set-current-version --deployment-name drover --build-id 1.5.0 --yes
#   nomad job run -var 'builds={"1.5.0"="/opt/drover/1.5.0/worker"}' drover-worker.nomad.hcl
#
# Without builds it runs one group, "worker", of worker_binary under the
# build ID the binary gives itself; a new binary there replaces the
# workers one by one, which strands the runs pinned to the old build.

variable "datacenters" {
  type        = list(string)
  default     = ["*"]
  description = "where the worker may run"
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
# worker_url serves the one group without builds; with builds, each
# build's binary is a path on the clients.
variable "worker_binary" {
  type        = string
  default     = "/usr/local/bin/worker"
  description = "path of Drover's worker binary on the clients (unused with worker_url)"
}

variable "worker_url" {
  type        = string
  default     = ""
  description = "where Nomad downloads an archive holding the worker binary as \"worker\" (any artifact source: https://, s3::, ...); empty: worker_binary on the clients. Not used with builds"
}

variable "worker_checksum" {
  type        = string
  default     = ""
  description = "the archive's checksum, type:value (sha256:...); checked before the worker starts"
}

variable "builds" {
  type        = map(string)
  default     = {}
  description = "the worker builds to run side by side, build ID => path of that build's worker binary on the clients: a group of count workers each, worker-BUILD, polling as that build (--build-id). Empty: one group of worker_binary"
}

variable "count" {
  type        = number
  default     = 2
  description = "how many workers; each polls the same task queues"
}

locals {
  # The group name's suffix ("" for the one group without builds) => the
  # build ID ("" for the binary's own) and the binary.
  # With worker_url (and no builds) the one group's binary is an artifact.
  builds = length(var.builds) > 0 ? { for id, bin in var.builds : "-${id}" => { id = id, binary = bin, url = "" } } : { "" = { id = "", binary = var.worker_binary, url = var.worker_url } }
}

job "drover-worker" {
  type        = "service"
  datacenters = var.datacenters

  dynamic "group" {
    for_each = local.builds
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

        # With worker_url, the worker comes as an artifact (see above).
        dynamic "artifact" {
          for_each = build.value.url == "" ? [] : [build.value.url]
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
          command = build.value.url == "" ? build.value.binary : "${NOMAD_TASK_DIR}/drover/worker"
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

        # From the worker's measured resident memory (README, "Running it
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
