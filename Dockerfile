# One image per service: docker build --build-arg SERVICE=gateway .
# (SERVICE=tools/pgsim for the payment simulator)
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum go.work go.work.sum ./
COPY tools/go.mod tools/go.sum ./tools/
RUN go mod download
COPY . .
ARG SERVICE
RUN CGO_ENABLED=0 go build -trimpath -o /out/service ./${SERVICE}

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/service /usr/local/bin/service
ENTRYPOINT ["/usr/local/bin/service"]
