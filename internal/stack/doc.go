// Package stack runs Drover's local embedded stack as real processes: the
// Temporal dev server (the pinned CLI in bin/, with a file database in
// SQLite's write-ahead-log mode, every commit synced), two
// simulated storage sites (one drover-sim process each, replicating to
// each other), the worker, and a data writer on each site's loopback
// client address. `make demo` runs a failover, reprotect and failback on
// it and stops it; `make up` leaves it running and `make down` stops it.
//
// Every process the stack starts is recorded in the run directory's pid
// file; Stop and Down end only those, by PID, after checking that the
// PID still runs the recorded binary. The worker counts as up once it
// polls its task queue and its /readyz answers (a versioned worker's
// build registered with the deployment). A process that ends without the stack ending it
// is reported with its exit status and the end of its log (Ended), and
// every wait of the stack and the demo gives up at once when it happens.
//
// With Options.SQL the stack runs Temporal as production does instead of
// the dev server: the Temporal server built from its Go module
// (bin/temporal-server) on a throwaway PostgreSQL cluster of the
// machine's PostgreSQL (Debian's postgresql package; run as the postgres
// user when the stack runs as root), both schemas set up with the
// server's SQL tool (bin/temporal-sql-tool), then the namespace and
// Drover's search attributes created with the temporal CLI. Stop stops
// PostgreSQL after the server and removes its cluster. make e2e-sql runs
// the e2e scenarios on it.
//
// The end-to-end tests (e2e/) and the benchmark (cmd/drover-bench) run
// the same stack with their own plan and inventory (Options.Groups), crash
// and restart its processes (Kill, Restart: the worker with kill -9, the
// Temporal dev server on its file database), or start the sites alone
// (Options.StorageOnly) for a baseline without Temporal. An upgrade run
// (make e2e-upgrade) gives the stack another worker binary and flags
// (Options.Worker, WorkerArgs), starts a further worker of another build
// beside it (StartWorker), stops either as an operator would (Terminate)
// and sets dynamic config on the dev server (Options.TemporalArgs).
//
// The demo (Demo) drives the stack with the built drctl, as an operator
// would: protect, drill, the loss of east and a failover to west, east's
// return and a reprotect, a failback to east. It judges the run with the
// simulator's invariant checker over both sites' states, and counts the
// writes lost: those east acknowledged after its last sync (what the RPO
// allows) and those lost in the failback (which must be none). The
// failover must have run pinned to a build of Worker Deployment drover,
// which it prints.
package stack
