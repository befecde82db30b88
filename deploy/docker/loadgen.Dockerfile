# gpulens-loadgen: pure Go, built static (CGO_ENABLED=0), on an empty image
# with the CA certificates (for https targets).
# Build from the repository root:
#   docker build -f deploy/docker/loadgen.Dockerfile -t gpulens/gpulens-loadgen .
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG REVISION=unknown
RUN CGO_ENABLED=0 go build -trimpath -o /out/gpulens-loadgen \
      -ldflags "-s -w -X github.com/prometheus/common/version.Version=${VERSION} -X github.com/prometheus/common/version.Revision=${REVISION} -X github.com/prometheus/common/version.Branch=main" \
      ./cmd/gpulens-loadgen

FROM scratch
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/gpulens-loadgen /usr/bin/gpulens-loadgen
EXPOSE 9843 8000
USER 65532:65532
ENTRYPOINT ["/usr/bin/gpulens-loadgen"]
