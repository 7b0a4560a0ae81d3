# One final stage per image, each FROM scratch: the static binary `make build`
# made on the host (CGO_ENABLED=0, the version in its ldflags) and the few files
# hack/images.sh writes beside it (an /etc/passwd and /etc/group naming uid 0
# and 65532, the CA bundle). No base image is pulled, so no registry is needed.
# The build context is bin/images/context, not the repository root:
#   make images                       # buildah (Debian: apt-get install buildah)
#   make images IMAGE_BUILDER=docker  # docker buildx, the same stages
# both write bin/images/NAME.tar (OCI archives) tagged ghcr.io/nodewise/NAME:TAG.
# By hand: make image-context, then
#   docker buildx build -f Dockerfile --target orchestrator -t ghcr.io/nodewise/orchestrator:v0.2.0 bin/images/context

# The orchestrator only talks to the API server and the agents: non-root,
# nothing but the binary and CA certificates.
FROM scratch AS orchestrator
ARG VERSION=dev
LABEL org.opencontainers.image.title=nodewise-orchestrator org.opencontainers.image.version=${VERSION} org.opencontainers.image.source=https://github.com/nodewise/nodewise
COPY rootfs/ /
COPY orchestrator /orchestrator
USER 65532:65532
ENTRYPOINT ["/orchestrator"]

# The node agent runs as uid 0 with a read-only root filesystem; its
# DaemonSet adds CAP_BPF and CAP_PERFMON (eBPF) and, for the proof of
# enrollment, CAP_SYS_PTRACE, CAP_SYS_ADMIN and CAP_NET_ADMIN, with
# hostNetwork and read-only host paths: docs/runbook.md ("Privileges").
FROM scratch AS nodeagent
ARG VERSION=dev
LABEL org.opencontainers.image.title=nodewise-nodeagent org.opencontainers.image.version=${VERSION} org.opencontainers.image.source=https://github.com/nodewise/nodewise
COPY rootfs/ /
COPY nodeagent /nodeagent
ENTRYPOINT ["/nodeagent"]

# The probe (deploy/probe) only opens TCP connections to its peers:
# non-root, no capabilities, nothing but the binary.
FROM scratch AS probe
ARG VERSION=dev
LABEL org.opencontainers.image.title=nodewise-probe org.opencontainers.image.version=${VERSION} org.opencontainers.image.source=https://github.com/nodewise/nodewise
COPY rootfs/ /
COPY probe /probe
USER 65532:65532
ENTRYPOINT ["/probe"]

# The sandbox (pause) image of sim/cluster's real kubelet node, not shipped:
# it holds each pod's namespaces until SIGTERM (hack/pause).
FROM scratch AS pause
COPY pause /pause
USER 65535:65535
ENTRYPOINT ["/pause"]

# The stand-in ztunnel of sim/cluster's real node, not shipped: it speaks
# ZDS with the real istio-cni and listens in each pod it is handed
# (sim/zds/ztunnel). Root, as ztunnel runs, for setns into the pods' netns.
FROM scratch AS ztunnel
COPY rootfs/ /
COPY ztunnel /ztunnel
ENTRYPOINT ["/ztunnel"]
