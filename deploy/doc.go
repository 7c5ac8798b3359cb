// Package deploy holds what runs Drover outside the local embedded stack:
// the files docker-compose.yaml mounts from deploy/compose (the simulated
// sites' configurations and the demo plan with the Compose network's
// addresses); the Temporal server's configuration on PostgreSQL
// (deploy/temporal: one cluster, or one of two named clusters joined for
// multi-cluster replication, with the dynamic configuration they need;
// make e2e-sites runs both sites' clusters from it); the Nomad jobs of deploy/nomad (the central worker,
// and a site's own worker, drover-site-worker-SITE, one job per site,
// as service jobs with their settings and secrets from Nomad Variables
// named after the job and health checks on /healthz and /readyz; the
// worker downloaded from a release's archive, its checksum checked; the
// central worker one group per build it runs, two side by side during
// an upgrade); and the Prometheus alert rules of deploy/prometheus.
//
// Its tests validate docker-compose.yaml with a small strict loader
// (gopkg.in/yaml.v3 into the Compose keys the file uses, with Compose's
// interpolation and the consistency checks of `docker compose config`:
// services waited for, networks and volumes declared, port syntax),
// check that its Temporal services are the images Temporal
// maintains at the server version the Makefile builds, set up by
// one-shot schema and namespace services, with a health check that waits
// for the namespace, and load the files it uses. They check that every
// alert rule names metrics the worker exports and is in docs/reference/metrics.md. They
// render the Nomad jobs with HCL2 as `nomad job run -var` does (no agent
// needed): the site worker at east and at west, whose job IDs and
// variable paths differ and whose datacenters are the site's; the
// central worker's datacenters required; the release's archive for the
// clients' architecture with its checksum by default, a job without
// them refused. With
// a nomad binary on PATH they parse the Nomad jobs with a real `nomad
// agent -dev` (the parser the Nomad adapter uses) and run them there
// against the Temporal dev server, until every worker passes its checks
// and polls its task queue: the central worker from the binary's path,
// the site worker downloaded as a .tar.gz artifact (worker_url) over
// HTTP on the loopback, its checksum checked. They run the central
// worker through an upgrade: a second build added beside the first
// leaves its workers untouched, and dropping the first stops its workers
// alone.
package deploy
