# Drover's image: the worker, drctl, the storage simulator and the stack
# tool. docker-compose.yaml builds it for the worker and the simulated
# sites.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/ ./cmd/worker ./cmd/drctl ./cmd/drover-sim ./cmd/drover-stack

# The worker runs exec hooks through /bin/sh, so the runtime image keeps
# a shell.
FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates curl \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home /var/lib/drover --create-home drover
COPY --from=build /out/ /usr/local/bin/
COPY plans/examples/ /etc/drover/plans/
COPY deploy/compose/ /etc/drover/compose/
USER drover
WORKDIR /var/lib/drover
EXPOSE 9464
CMD ["worker", "--metrics", "0.0.0.0:9464", "--log-format", "json"]
