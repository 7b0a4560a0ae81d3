# syntax=docker/dockerfile:1
# One build stage makes the static binaries with the same `make build`
# CI runs; small final stages ship one binary each.
#   docker build --target orchestrator -t nodewise/orchestrator .
#   docker build --target nodeagent    -t nodewise/nodeagent .
#   docker build --target nodewise     -t nodewise/cli .
# `make images` builds all three with buildah, podman or docker buildx,
# tagged with the version (VERSION, from git describe).
#   docker build --target probe        -t nodewise/probe .

FROM golang:1.26.8-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# The generated eBPF objects are committed, so the build needs no clang. The
# version comes in as an argument: the build context may have no .git.
ARG VERSION=dev
RUN make build VERSION=${VERSION}

# The orchestrator only talks to the API server and the agents: non-root,
# nothing but the binary and CA certificates.
FROM gcr.io/distroless/static-debian12:nonroot AS orchestrator
COPY --from=build /src/bin/orchestrator /orchestrator
USER 65532:65532
ENTRYPOINT ["/orchestrator"]

# The node agent loads eBPF: its DaemonSet grants CAP_BPF and CAP_PERFMON
# (and nothing else) to uid 0, with a read-only root filesystem; see
# deploy/nodeagent.
FROM gcr.io/distroless/static-debian12 AS nodeagent
COPY --from=build /src/bin/nodeagent /nodeagent
ENTRYPOINT ["/nodeagent"]

FROM gcr.io/distroless/static-debian12:nonroot AS nodewise
COPY --from=build /src/bin/nodewise /nodewise
USER 65532:65532
ENTRYPOINT ["/nodewise"]

# The probe (deploy/probe) only opens TCP connections to its peers:
# non-root, no capabilities, nothing but the binary.
FROM gcr.io/distroless/static-debian12:nonroot AS probe
COPY --from=build /src/bin/probe /probe
USER 65532:65532
ENTRYPOINT ["/probe"]
