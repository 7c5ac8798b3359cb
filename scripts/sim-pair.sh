#!/usr/bin/env bash
# Runs two peered simulated storage sites, east (primary) and west, in the
# foreground, with state under .run/sim, at the addresses that
# plans/examples/demo.yaml names. Ctrl-C stops both.
set -euo pipefail
cd "$(dirname "$0")/.."
run=.run/sim
mkdir -p "$run"
# The pair's shared secret for its peer API, new at every start.
token=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
cat > "$run/sites.yaml" <<YAML
sites:
  - name: east
    grpc: 127.0.0.1:7300
    data: 127.0.0.1:7301
    control: 127.0.0.1:7302
    peer: 127.0.0.1:7401
    peerToken: $token
    stateDir: $PWD/$run/east
    primary: true
    groups:
      - {id: vg-db, volumes: [db-data, db-wal]}
      - {id: vg-web, volumes: [web-assets]}
  - name: west
    grpc: 127.0.0.1:7400
    data: 127.0.0.1:7401
    control: 127.0.0.1:7402
    peer: 127.0.0.1:7301
    peerToken: $token
    stateDir: $PWD/$run/west
    groups:
      - {id: vg-db, volumes: [db-data, db-wal]}
      - {id: vg-web, volumes: [web-assets]}
YAML
echo "east: grpc 127.0.0.1:7300, data 127.0.0.1:7301, control http://127.0.0.1:7302/v1/state"
echo "west: grpc 127.0.0.1:7400, data 127.0.0.1:7401, control http://127.0.0.1:7402/v1/state"
echo "plans/examples/demo.yaml describes this pair."
exec ./bin/drover-sim --config "$run/sites.yaml"
