# gpulens-loadgen: pure Go, built static (CGO_ENABLED=0), on an empty image
# with the CA certificates (for https targets).
# Build from the repository root:
#   docker build -f deploy/docker/loadgen.Dockerfile -t gpulens/gpulens-loadgen .
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
RUN CGO_ENABLED=0 go build -trimpath -o /out/gpulens-loadgen \
      -ldflags "-s -w -X github.com/prometheus/common/version.Version=${VERSION} -X github.com/prometheus/common/version.Revision=${REVISION} -X github.com/prometheus/common/version.Branch=main -X github.com/prometheus/common/version.BuildDate=${BUILD_DATE}" \
      ./cmd/gpulens-loadgen

FROM scratch
# What the image is (OCI annotations); make images passes the build args.
ARG VERSION=dev
ARG REVISION=unknown
ARG BUILD_DATE=unknown
LABEL org.opencontainers.image.title="gpulens-loadgen" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${BUILD_DATE}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/gpulens/gpulens"
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/gpulens-loadgen /usr/bin/gpulens-loadgen
COPY LICENSE /LICENSE
EXPOSE 9843 8000
USER 65532:65532
ENTRYPOINT ["/usr/bin/gpulens-loadgen"]
