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

variable "worker_binary" {
  type        = string
  default     = "/usr/local/bin/worker"
  description = "path of Drover's worker binary on the clients"
}

variable "count" {
  type        = number
  default     = 2
  description = "how many workers; each polls the same task queues"
}

job "drover-worker" {
  type        = "service"
  datacenters = var.datacenters

  group "worker" {
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

      config {
        command = var.worker_binary
        args = [
          "--metrics", "${NOMAD_ADDR_http}",
          "--log-format", "json",
          "--identity", "${NOMAD_JOB_NAME}/${NOMAD_ALLOC_ID}",
          "--connect-timeout", "2m",
        ]
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
