# The share-worker image: built from source in a Rust image, run from a slim Debian image with CA
# certificates and the libraries librdkafka needs, as a non-root user, under tini (PID 1: it
# forwards signals to the worker and reaps the orphans that exec handlers' commands leave).
#
#   podman build -t share-worker .            (or docker build)
#   podman run --rm -v ./worker.toml:/etc/share-worker/worker.toml:ro share-worker
#
# Both base images are arguments, so a mirror or a base image of one's own can stand in. Tags
# move: for a build that is the same tomorrow, pin each by its digest, looked up where the image
# registry is reachable (`skopeo inspect --format '{{.Digest}}' docker://IMAGE`: the digest of
# the multi-architecture index), e.g.
#   podman build --build-arg BASE_IMAGE=docker.io/library/debian:bookworm-slim@sha256:<digest> \
#                --build-arg RUST_IMAGE=docker.io/library/rust:1-slim-bookworm@sha256:<digest> .
ARG RUST_IMAGE=docker.io/library/rust:1-slim-bookworm
ARG BASE_IMAGE=docker.io/library/debian:bookworm-slim

FROM ${RUST_IMAGE} AS build
ARG DEBIAN_FRONTEND=noninteractive
# librdkafka is built from source by rdkafka-sys: a C toolchain, perl and OpenSSL's headers.
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc g++ make perl pkg-config libssl-dev zlib1g-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p worker-cli \
 && mkdir /out && cp target/release/share-worker /out/share-worker

FROM ${BASE_IMAGE} AS runtime
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates libssl3 zlib1g tini \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/cache/apt/archives/*.deb \
 && groupadd --gid 10001 share-worker \
 && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin share-worker
COPY --from=build /out/share-worker /usr/local/bin/share-worker
USER 10001:10001
# /healthz, /readyz and /metrics when `telemetry.listen` is set (the Helm chart sets 0.0.0.0:9464).
EXPOSE 9464
# tini runs as PID 1 and the worker as its child: a process whose parent exits (an exec handler's
# `cmd &`) is reparented to PID 1, and the worker, which waits only for its own children, would
# leave it a zombie for good. tini reaps every such orphan, and forwards SIGTERM and SIGINT to the
# worker alone (no -g): the worker's drain decides when its handlers' commands stop.
ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/share-worker"]
CMD ["run", "--config", "/etc/share-worker/worker.toml"]
