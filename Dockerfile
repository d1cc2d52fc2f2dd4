# The facilitator daemon for production: no embedded development ledger, no OpenSSL. The
# `proxy` stage is tollgate-proxy, the paying reverse proxy, built by the same build stage.
#
#   docker build -t tollgate-facilitator .
#   docker build --target proxy -t tollgate-proxy .
#   docker run -v $PWD/proxy.toml:/etc/tollgate/proxy.toml:ro -e TOLLGATE_API_KEY=… -p 8090:8090 tollgate-proxy
#   docker build --build-arg TOLLGATE_FEATURES=otel -t tollgate-facilitator .   # trace export
#   docker run -e TOLLGATE_EVM_RPC_URL=… -e TOLLGATE_MASTER_KEY=… -p 8402:8402 tollgate-facilitator
#
# The build stage runs scripts/build-release, the same command CI runs where Docker is absent.

FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
ENV CARGO_TARGET_DIR=/src/target
# Optional cargo features of the daemon (`otel`: OpenTelemetry trace export).
ARG TOLLGATE_FEATURES=""
RUN TOLLGATE_FEATURES="$TOLLGATE_FEATURES" scripts/build-release

# tollgate-proxy: its configuration mounted at /etc/tollgate/proxy.toml (reloaded when it changes).
FROM debian:bookworm-slim AS proxy
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --no-create-home tollgate
COPY --from=build /src/target/production/tollgate-proxy /usr/local/bin/tollgate-proxy
USER tollgate
ENV TOLLGATE_PROXY_CONFIG=/etc/tollgate/proxy.toml
EXPOSE 8090
ENTRYPOINT ["tollgate-proxy"]

# The facilitator (the default target).
FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home-dir /var/lib/tollgate --create-home tollgate
COPY --from=build /src/target/production/tollgate-facilitator /usr/local/bin/tollgate-facilitator
USER tollgate
WORKDIR /var/lib/tollgate
# Listen on every interface inside the container; the data (SQLite, when used) stays in the volume.
ENV TOLLGATE_LISTEN=0.0.0.0:8402 \
    TOLLGATE_DATABASE_URL=sqlite:///var/lib/tollgate/tollgate.db \
    TOLLGATE_LOG_FORMAT=json
VOLUME ["/var/lib/tollgate"]
EXPOSE 8402
ENTRYPOINT ["tollgate-facilitator"]
CMD ["serve"]
