# Gleaner's image: the three commands as static binaries on a minimal, non-root base.
#   docker build -t ghcr.io/gleaner-dev/gleaner:v0.1.0 --build-arg VERSION=v0.1.0 .
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ENV CGO_ENABLED=0
RUN make build VERSION=${VERSION} BIN=/out

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/gleaner /out/gleaner-scheduler /out/gleaner-controller /
USER 65532:65532
ENTRYPOINT ["/gleaner"]
