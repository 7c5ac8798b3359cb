#!/usr/bin/env bash
# Regenerates the Go code of the CSI-Addons protos under csiaddons/.
# The .proto files are kept as the specs give them (their own go_package
# options included); the Go import paths are mapped here instead.
set -euo pipefail
cd "$(dirname "$0")/.."

PROTOC_VERSION=3.21.12
PROTOC_GEN_GO_VERSION=v1.36.12
PROTOC_GEN_GO_GRPC_VERSION=v1.6.2
MODULE=github.com/drover-dr/drover
CSI_IMPORT=github.com/container-storage-interface/spec/lib/go/csi

have=$(protoc --version 2>/dev/null | awk '{print $2}') || true
if [ "$have" != "$PROTOC_VERSION" ]; then
  echo "gen-proto: need protoc $PROTOC_VERSION, found '${have:-none}' (Debian: apt-get install protobuf-compiler)" >&2
  exit 1
fi

bin="$PWD/bin"
mkdir -p "$bin"
GOBIN="$bin" go install "google.golang.org/protobuf/cmd/protoc-gen-go@$PROTOC_GEN_GO_VERSION"
GOBIN="$bin" go install "google.golang.org/grpc/cmd/protoc-gen-go-grpc@$PROTOC_GEN_GO_GRPC_VERSION"

# csi.proto ships in the CSI spec module; the CSI-Addons protos import it by
# its repository path, so lay it out under that path in a scratch include dir.
inc=$(mktemp -d)
trap 'rm -rf "$inc"' EXIT
csidir=$(go list -m -f '{{.Dir}}' github.com/container-storage-interface/spec)
mkdir -p "$inc/$CSI_IMPORT"
cp "$csidir/csi.proto" "$inc/$CSI_IMPORT/csi.proto"

maps="M$CSI_IMPORT/csi.proto=$CSI_IMPORT"
for svc in fence replication identity; do
  maps="$maps,M$svc/$svc.proto=$MODULE/csiaddons/$svc"
done

for svc in fence replication identity; do
  PATH="$bin:$PATH" protoc -I csiaddons -I "$inc" -I /usr/include \
    --go_out=csiaddons --go_opt=paths=source_relative,"$maps" \
    --go-grpc_out=csiaddons --go-grpc_opt=paths=source_relative,"$maps" \
    "csiaddons/$svc/$svc.proto"
done
# The grpc generator's comment points at a package index site; the
# project names no such hosts, so the pointer becomes the package name.
sed -i 's|please refer to https://[^ ]*/google.golang.org/grpc/?tab=doc#ClientConn.NewStream.|please refer to the documentation of grpc.ClientConn.NewStream.|' \
  csiaddons/*/*_grpc.pb.go
gofmt -l csiaddons >/dev/null
echo "gen-proto: regenerated csiaddons/{fence,replication,identity}"
