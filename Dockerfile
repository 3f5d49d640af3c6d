# syntax=docker/dockerfile:1
# Sluice: a static binary (pure-Go SQLite and PostgreSQL drivers, no cgo) on distroless, non-root.
#   docker build -t sluice .        docker compose up    (app + PostgreSQL, see docker-compose.yml)

FROM golang:1.26-bookworm AS build
WORKDIR /src
# Modules first, so that source edits do not invalidate the download layer.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG VERSION=dev
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w -X github.com/sluice-dev/sluice/internal/app.Version=${VERSION}" -o /out/sluice ./cmd/app \
 && mkdir -p /out/var/lib/sluice

# static-debian12 has CA certificates and tzdata, no shell, no package manager; :nonroot runs as
# uid/gid 65532.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/sluice /usr/local/bin/sluice
# The working directory holds the default SQLite file (sqlite:data/sluice.db) when no
# DATABASE_URL is given; mount a volume there to keep it.
COPY --from=build --chown=65532:65532 /out/var/lib/sluice /var/lib/sluice
WORKDIR /var/lib/sluice
USER 65532:65532
ENV LISTEN_ADDR=:8080
# 8080: the API and dashboard; 9090 (METRICS_ADDR=:9090) and 8081 (GRPC_ADDR=:8081) when set, for
# the scraper and Envoy on a private network.
EXPOSE 8080
# No curl in distroless: the binary probes itself (GET /healthz on LISTEN_ADDR).
HEALTHCHECK --interval=10s --timeout=5s --start-period=20s --retries=3 CMD ["/usr/local/bin/sluice", "healthcheck"]
# SIGTERM (docker stop) starts the graceful shutdown: stop accepting, finish in-flight requests
# (up to 20 s; give docker stop at least 30 s), flush background work, close the database.
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/sluice"]
CMD ["serve"]
