# Quill: a CPU LLM server. Two stages on Debian 12 (bookworm), the distribution every
# dependency comes from.
#
#   docker build -t quill .
#   docker run --rm -p 50051:50051 -p 8080:8080 -p 9090:9090 quill        # built-in kjv-1m
#   docker run --rm -p 50051:50051 -p 9090:9090 -v $PWD/models:/models:ro \
#       -e QUILL_MODEL=/models/model.gguf quill                            # your model
#
# The tree is compiled with -march=x86-64-v3, so the image needs an AVX2/FMA CPU
# (AVX-512 kernels are chosen at run time when the CPU has them).

# --- build: the same setup and build scripts CI runs --------------------------------------
FROM debian:bookworm-slim AS build
WORKDIR /src
# Dependencies first, in their own layer, so that source edits do not reinstall them.
COPY scripts/setup.sh scripts/setup.sh
RUN bash scripts/setup.sh
COPY . .
RUN bash scripts/build.sh

# --- runtime: shared libraries and the three binaries only ---------------------------------
FROM debian:bookworm-slim
# scripts/check_deploy.py --build-dir checks that this list covers every shared library
# the built binaries load (ldd -> dpkg -S).
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      libgrpc++1.51 libgrpc29 libprotobuf32 libabsl20220623 libdnnl2 libgomp1 \
      libspdlog1.10 libfmt9 libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 \
      libre2-9 libc-ares2 libssl3 zlib1g libpcre2-8-0 \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/build/server/quill-server /src/build/client/quill \
                  /src/build/engine/tools/quill-run /usr/local/bin/
COPY --from=build /src/models/kjv-1m.gguf /usr/share/quill/models/kjv-1m.gguf
RUN useradd --system --uid 10001 --home-dir /nonexistent --shell /usr/sbin/nologin quill \
 && mkdir -p /models
USER 10001:10001

# Every quill-server flag is also an environment variable (QUILL_<FLAG>). Mount a model at
# /models and set QUILL_MODEL=/models/model.gguf to serve it.
ENV QUILL_MODEL=/usr/share/quill/models/kjv-1m.gguf \
    QUILL_HOST=0.0.0.0 \
    QUILL_PORT=50051 \
    QUILL_METRICS_PORT=9090 \
    QUILL_HTTP_PORT=8080 \
    QUILL_DRAIN_TIMEOUT=30s
VOLUME ["/models"]
EXPOSE 50051 8080 9090
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=3 \
  CMD quill health --addr 127.0.0.1:50051
# SIGTERM drains running streams (QUILL_DRAIN_TIMEOUT); give `docker stop -t` more than that.
STOPSIGNAL SIGTERM
ENTRYPOINT ["quill-server"]
