# gpulens-exporter: cgo (go-nvml dlopens libnvidia-ml.so.1 at start) on glibc.
# The image holds no NVIDIA library: the NVIDIA container toolkit mounts the
# host driver's libnvidia-ml.so.1 and device nodes when the container runs
# with NVIDIA_VISIBLE_DEVICES=all and NVIDIA_DRIVER_CAPABILITIES=utility
# (`--gpus all` / compose `gpus: all` / the nvidia runtime class).
# The continuous probe (--collector.probe) also needs libcuda.so.1, the PTX
# JIT and /dev/nvidia-uvm: run it with NVIDIA_DRIVER_CAPABILITIES=compute,utility
# (the probe switches of deploy/: deploy/README.md, "The probe").
# Build from the repository root:
#   docker build -f deploy/docker/exporter.Dockerfile -t gpulens/gpulens-exporter .
# or, versioned as the release (VERSION, REVISION, BUILD_DATE build args):
#   make images          # `make release` prints the commands
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG REVISION=unknown
ARG BUILD_DATE=unknown
RUN CGO_ENABLED=1 CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations" \
    go build -trimpath -o /out/gpulens-exporter \
      -ldflags "-s -w -X github.com/prometheus/common/version.Version=${VERSION} -X github.com/prometheus/common/version.Revision=${REVISION} -X github.com/prometheus/common/version.Branch=main -X github.com/prometheus/common/version.BuildDate=${BUILD_DATE}" \
      ./cmd/gpulens-exporter

# Same Debian 12 glibc as the builder.
FROM debian:bookworm-slim
# What the image is (OCI annotations); make images passes the build args.
ARG VERSION=dev
ARG REVISION=unknown
ARG BUILD_DATE=unknown
LABEL org.opencontainers.image.title="gpulens-exporter" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${BUILD_DATE}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/gpulens/gpulens"
COPY --from=build /out/gpulens-exporter /usr/bin/gpulens-exporter
COPY LICENSE /LICENSE
ENV NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=utility
EXPOSE 9842
# Non-root by default (simulated fleets, NVML without pod attribution). The
# Kubernetes DaemonSet runs it as user 0 for the kubelet's pod-resources
# socket; see deploy/kubernetes/base/daemonset.yaml.
USER 65532:65532
ENTRYPOINT ["/usr/bin/gpulens-exporter"]
