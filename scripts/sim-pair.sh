#!/usr/bin/env bash
# Runs two peered simulated storage sites, east (primary) and west, in the
# foreground, with state under .run/sim. Ctrl-C stops both.
set -euo pipefail
cd "$(dirname "$0")/.."
run=.run/sim
mkdir -p "$run"
cat > "$run/sites.yaml" <<YAML
sites:
  - name: east
    grpc: unix://$PWD/$run/east.sock
    data: 127.0.0.1:7301
    control: 127.0.0.1:7311
    peer: 127.0.0.1:7302
    stateDir: $PWD/$run/east
    primary: true
    groups:
      - {id: vg-db, volumes: [db-data, db-wal]}
      - {id: vg-web, volumes: [web-assets]}
  - name: west
    grpc: unix://$PWD/$run/west.sock
    data: 127.0.0.1:7302
    control: 127.0.0.1:7312
    peer: 127.0.0.1:7301
    stateDir: $PWD/$run/west
    groups:
      - {id: vg-db, volumes: [db-data, db-wal]}
      - {id: vg-web, volumes: [web-assets]}
YAML
echo "east: grpc unix://$PWD/$run/east.sock, data 127.0.0.1:7301, control http://127.0.0.1:7311/v1/state"
echo "west: grpc unix://$PWD/$run/west.sock, data 127.0.0.1:7302, control http://127.0.0.1:7312/v1/state"
exec ./bin/drover-sim --config "$run/sites.yaml"
