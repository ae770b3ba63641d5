# psflow image: one executable for every role (coordinator, ps, worker, clients).
#
#   docker build -t psflow .
#   docker run --rm psflow train /usr/share/psflow/examples/fashion-mnist-softmax.json
#
# BASE is any Debian 12 (bookworm) image with apt; the default is Docker Hub's slim image.
# scripts/test-docker.sh passes a locally bootstrapped one instead.
#
# The CUDA image, for GPU workers ("device": "cuda" or "auto"):
#
#   docker build --build-arg PSFLOW_CUDA=ON -t psflow:cuda .
#   docker run --rm --gpus all psflow:cuda train JOB.json
#
# PSFLOW_CUDA=ON builds the CUDA backend: the builder installs nvcc and cuBLAS
# (CUDA_VERSION) from NVIDIA's CUDA repository for Debian 12, the runtime image the CUDA
# runtime and cuBLAS libraries; the NVIDIA driver comes from the host (the NVIDIA
# Container Toolkit's `--gpus`, or Kubernetes' nvidia.com/gpu). Without a usable GPU that
# image behaves like the CPU one: "cuda" exits 69 naming the reason, "auto" trains on the
# CPU. PSFLOW_CUDA=OFF (the default) builds the CPU image and needs nothing from NVIDIA.
ARG BASE=debian:bookworm-slim
ARG PSFLOW_CUDA=OFF
ARG CUDA_VERSION=13.0
ARG CUDA_REPO=https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64

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

# PSFLOW_CUDA=ON: g++ (nvcc's host compiler) and, from NVIDIA's repository, nvcc and the
# cuBLAS and CUDA runtime headers. NVIDIA's keyring package is kept in /cuda-keyring for
# the runtime stage.
ARG PSFLOW_CUDA
ARG CUDA_VERSION
ARG CUDA_REPO
RUN case "$PSFLOW_CUDA" in ON | OFF) ;; \
      *) echo "PSFLOW_CUDA must be ON or OFF, got '$PSFLOW_CUDA'" >&2; exit 1 ;; esac \
 && mkdir -p /cuda-keyring \
 && if [ "$PSFLOW_CUDA" = ON ]; then \
      cuda_pkg=$(echo "$CUDA_VERSION" | tr . -) \
      && apt-get update -q \
      && apt-get install -y -q --no-install-recommends curl g++ \
      && curl -fsSL -o /cuda-keyring/cuda-keyring.deb "$CUDA_REPO/cuda-keyring_1.1-1_all.deb" \
      && dpkg -i /cuda-keyring/cuda-keyring.deb \
      && apt-get update -q \
      && apt-get install -y -q --no-install-recommends "cuda-nvcc-$cuda_pkg" \
           "cuda-cudart-dev-$cuda_pkg" "libcublas-dev-$cuda_pkg" \
      && rm -rf /var/lib/apt/lists/*; \
    fi

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
# (dashboard, examples, OpenAPI document and schemas) under /out. With PSFLOW_CUDA=ON the
# configure fails unless the CUDA backend can be built, and the executable must link cuBLAS.
RUN cmake -S . -B /build -DCMAKE_BUILD_TYPE=Release -DPSFLOW_BUILD_TESTS=OFF \
      -DPSFLOW_CUDA="$PSFLOW_CUDA" -DCUDAToolkit_ROOT="/usr/local/cuda-$CUDA_VERSION" \
 && cmake --build /build -j"$(nproc)" --target psflow \
 && if [ "$PSFLOW_CUDA" = ON ]; then ldd /build/psflow | grep -q libcublas; fi \
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

# PSFLOW_CUDA=ON: the CUDA runtime and cuBLAS libraries (not the toolkit), on the loader's
# path. The driver's libcuda comes from the host at run time.
ARG PSFLOW_CUDA
ARG CUDA_VERSION
COPY --from=builder /cuda-keyring/ /tmp/cuda-keyring/
RUN if [ "$PSFLOW_CUDA" = ON ]; then \
      cuda_pkg=$(echo "$CUDA_VERSION" | tr . -) \
      && dpkg -i /tmp/cuda-keyring/cuda-keyring.deb \
      && apt-get update -q \
      && apt-get install -y -q --no-install-recommends "cuda-cudart-$cuda_pkg" \
           "libcublas-$cuda_pkg" \
      && echo "/usr/local/cuda-$CUDA_VERSION/targets/x86_64-linux/lib" \
           | tee /etc/ld.so.conf.d/psflow-cuda.conf >/dev/null \
      && ldconfig \
      && apt-get clean \
      && rm -rf /var/lib/apt/lists/*; \
    fi \
 && rm -rf /tmp/cuda-keyring

# An unprivileged user whose home holds the coordinator's database, the checkpoints, the
# API token and the agent token. Named volumes mounted on these folders start with this
# ownership.
RUN groupadd --system --gid 10001 psflow \
 && useradd --system --uid 10001 --gid psflow --home-dir /var/lib/psflow \
      --shell /usr/sbin/nologin psflow \
 && install -d -o psflow -g psflow /var/lib/psflow /var/lib/psflow/data \
      /var/lib/psflow/checkpoints \
 && install -d -o psflow -g psflow -m 0700 /var/lib/psflow/token /var/lib/psflow/agent-token \
      /var/lib/psflow/segments

COPY --from=builder /out/ /

ENV PSFLOW_WEB=/usr/share/psflow/web \
    PSFLOW_CHECKPOINT_DIR=/var/lib/psflow/checkpoints
USER psflow
WORKDIR /var/lib/psflow
# 8080: the coordinator's REST API and dashboard; 2222: a ps task's data plane.
EXPOSE 8080 2222
ENTRYPOINT ["psflow"]
CMD ["--help"]
