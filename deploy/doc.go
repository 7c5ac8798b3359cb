// Package deploy holds what runs Drover outside the local embedded stack:
// the files docker-compose.yaml mounts from deploy/compose (the simulated
// sites' configurations and the demo plan with the Compose network's
// addresses). Its tests validate docker-compose.yaml the way
// `docker compose config` does, check that its Temporal services are the
// images Temporal maintains at the server version the Makefile builds,
// set up by one-shot schema and namespace services, with a health check
// that waits for the namespace, and load the files it uses.
package deploy
