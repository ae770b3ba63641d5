# psflow image: one executable for every role (coordinator, ps, worker, clients).
#
#   docker build -t psflow .
#   docker run --rm psflow train /usr/share/psflow/examples/fashion-mnist-softmax.json
#
# BASE is any Debian 12 (bookworm) image with apt; the default is Docker Hub's slim image.
# scripts/test-docker.sh passes a locally bootstrapped one instead.
ARG BASE=debian:bookworm-slim

# --- builder: compiler, -dev packages and npm, none of which reach the runtime image -----
FROM ${BASE} AS builder
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update -q \
 && apt-get install -y -q --no-install-recommends \
      cmake make pkg-config gcc libc6-dev git \
      libopenblas-dev libjansson-dev zlib1g-dev libwebsockets-dev \
      libmicrohttpd-dev libsqlite3-dev libcurl4-openssl-dev \
      nodejs npm ca-certificates \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /src
COPY . .

# The dashboard's uPlot from the npm registry (web/package-lock.json pins it); the install
# step below takes only its dist/ and licence from node_modules.
RUN if [ -f web/package.json ]; then \
      cd web \
      && if [ -f package-lock.json ]; then npm ci --no-audit --no-fund; \
         else npm install --no-audit --no-fund; fi; \
    fi

# Release build without the test suite: tests run in CI against the native build, the image
# only needs the executable. cmake --install lays out /usr/bin/psflow and /usr/share/psflow/
# (dashboard, examples, OpenAPI document and schemas) under /out.
RUN cmake -S . -B /build -DCMAKE_BUILD_TYPE=Release -DPSFLOW_BUILD_TESTS=OFF \
 && cmake --build /build -j"$(nproc)" --target psflow \
 && cmake --install /build --prefix /out/usr

# --- runtime: shared libraries, the data set, the executable, examples and dashboard ------
FROM ${BASE}
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update -q \
 && apt-get install -y -q --no-install-recommends \
      libopenblas0 libjansson4 libwebsockets17 libmicrohttpd12 libsqlite3-0 libcurl4 \
      zlib1g ca-certificates dataset-fashion-mnist \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/*

# An unprivileged user whose home holds the coordinator's database, the checkpoints and the
# API token. Named volumes mounted on these folders start with this ownership.
RUN groupadd --system --gid 10001 psflow \
 && useradd --system --uid 10001 --gid psflow --home-dir /var/lib/psflow \
      --shell /usr/sbin/nologin psflow \
 && install -d -o psflow -g psflow /var/lib/psflow /var/lib/psflow/data \
      /var/lib/psflow/checkpoints \
 && install -d -o psflow -g psflow -m 0700 /var/lib/psflow/token

COPY --from=builder /out/ /

ENV PSFLOW_WEB=/usr/share/psflow/web \
    PSFLOW_CHECKPOINT_DIR=/var/lib/psflow/checkpoints
USER psflow
WORKDIR /var/lib/psflow
# 8080: the coordinator's REST API and dashboard; 2222: a ps task's data plane.
EXPOSE 8080 2222
ENTRYPOINT ["psflow"]
CMD ["--help"]
