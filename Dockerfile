# syntax=docker/dockerfile:1
# pyserver's CPU image: the Triton-compatible server on Debian + Python.
#
#   docker build -t pyserver:cpu .
#   docker run --rm -p 8000-8002:8000-8002 -v $PWD/models:/models:ro \
#     --read-only --tmpfs /tmp pyserver:cpu
#
# `make image` builds it here with buildah (no Docker engine needed) and
# `make test-image` starts it and answers an inference; Dockerfile.cuda is the
# GPU variant. The build stage compiles the C++/Cython engine into a wheel;
# the runtime stage holds the venv with that wheel and its dependencies, plus
# only the shared libraries the installed code links (no compiler, no -dev
# package). It runs as uid 1000 and writes nothing outside /tmp, so it works
# with a read-only root filesystem.
#
# Build arguments:
#   BASE_IMAGE      a Debian bookworm image with python3 (3.10 or newer) and
#                   its venv module; both stages start from it.
#   PYSERVER_EXTRAS pyproject.toml extras to install (comma-separated), e.g.
#                   "openai,s3,gcs,azure" for the OpenAI frontend's templates
#                   and object-storage model repositories.
#   BUILD_JOBS      parallel compile jobs for the engine.
#
# Behind a TLS-intercepting proxy, hand pip its CA bundle as a build secret
# (never stored in a layer): --secret id=pip_cert,src=/path/to/ca-bundle.crt
ARG BASE_IMAGE=python:3.11-slim-bookworm

# ---------------------------------------------------------------- build ----
FROM ${BASE_IMAGE} AS build
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV DEBIAN_FRONTEND=noninteractive \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

# The compilers and the engine's -dev packages (make system-deps installs
# the same on a workstation), and Python's headers where the base lacks
# them. llhttp's C sources come from Debian's node-llhttp, unpacked rather
# than installed (installing it would pull in Node.js).
# Debian's versions follow the base image's release, hence no pins.
WORKDIR /tmp
# hadolint ignore=DL3008
RUN headers=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['include'])") \
 && if [ -f "$headers/Python.h" ]; then dev=""; else dev=python3-dev; fi \
 && apt-get -o Acquire::Retries=3 update \
 && apt-get -o Acquire::Retries=3 install -y --no-install-recommends \
      g++ libnghttp2-dev libxxhash-dev libfmt-dev libsimdjson-dev ${dev:+"$dev"} \
 && apt-get download node-llhttp \
 && dpkg -x node-llhttp_*.deb / && rm -f node-llhttp_*.deb \
 && test -f /usr/share/llhttp/llhttp.c \
 && rm -rf /var/lib/apt/lists/*

# The build tools (pyproject.toml's [build-system] requires) in a venv of
# their own; the wheel builds without isolation against them.
RUN --mount=type=secret,id=pip_cert \
    if [ -s /run/secrets/pip_cert ]; then export PIP_CERT=/run/secrets/pip_cert; fi \
 && python3 -m venv /opt/build \
 && /opt/build/bin/pip install "setuptools>=64" wheel "cython>=3.0" "cmake>=3.18" ninja \
      "numpy>=1.24" "grpcio-tools>=1.60"
ENV PATH=/opt/build/bin:$PATH

# The runtime venv with pyserver's dependencies, in a layer that only a
# change to pyproject.toml (or the extras) rebuilds.
ARG PYSERVER_EXTRAS=openai
COPY pyproject.toml /src/pyproject.toml
COPY docker/requirements.py docker/runtime-packages.sh /src/docker/
RUN --mount=type=secret,id=pip_cert \
    if [ -s /run/secrets/pip_cert ]; then export PIP_CERT=/run/secrets/pip_cert; fi \
 && python3 /src/docker/requirements.py /src/pyproject.toml --extras "${PYSERVER_EXTRAS}" \
      > /opt/requirements.txt \
 && python3 -m venv /opt/pyserver \
 && /opt/pyserver/bin/pip install -r /opt/requirements.txt

# pyserver's wheel (the engine compiled by CMake) and the tritonserver shim
# (`import tritonserver`, Triton's in-process API, on pyserver).
ARG BUILD_JOBS=2
COPY . /src
WORKDIR /src
RUN PYSERVER_BUILD_TYPE=Release PYSERVER_BUILD_JOBS="${BUILD_JOBS}" \
      pip wheel --no-deps --no-build-isolation -w /dist . ./shims/tritonserver \
 && /opt/pyserver/bin/pip install --no-deps /dist/*.whl \
 && /opt/pyserver/bin/pip check \
 && site=$(/opt/pyserver/bin/python -c "import sysconfig; print(sysconfig.get_paths()['platlib'])") \
 && /src/docker/runtime-packages.sh --require "$site/pyserver/engine" /opt/pyserver \
      > /opt/runtime-packages.txt \
 && echo libjemalloc2 >> /opt/runtime-packages.txt \
 && cat /opt/runtime-packages.txt

# -------------------------------------------------------------- runtime ----
FROM ${BASE_IMAGE} AS runtime
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# The shared libraries the installed code links, as the build stage found
# them (ldd + dpkg -S), and jemalloc, the server command's malloc
# (pyserver/runtime/allocator.py): the same list gives the same cached layer.
COPY --from=build /opt/runtime-packages.txt /opt/runtime-packages.txt
# Those the base already has are left as they are (no upgrade).
# hadolint ignore=DL3008
RUN mapfile -t missing < <(while read -r pkg; do \
      dpkg-query -W -f='${Status}\n' "$pkg" 2>/dev/null | grep -q '^install ok installed$' \
      || echo "$pkg"; done < /opt/runtime-packages.txt) \
 && if [ "${#missing[@]}" -gt 0 ]; then \
      echo "installing: ${missing[*]}" \
      && apt-get -o Acquire::Retries=3 update \
      && apt-get -o Acquire::Retries=3 install -y --no-install-recommends "${missing[@]}" \
      && apt-get clean \
      && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin; \
    fi \
 && (getent group 1000 >/dev/null || groupadd --gid 1000 pyserver) \
 && (getent passwd 1000 >/dev/null \
     || useradd --uid 1000 --gid 1000 --no-create-home --home-dir /tmp --shell /usr/sbin/nologin pyserver) \
 && mkdir -p /models /opt/tritonserver/bin \
 && ln -s /opt/pyserver/bin/tritonserver /opt/tritonserver/bin/tritonserver

COPY --from=build /opt/pyserver /opt/pyserver
# Flags go to tritonserver, commands run as given (docker/entrypoint.sh);
# /opt/tritonserver/bin/tritonserver is where Triton's image has the command
# (Seldon's and Triton's own charts name it so).
COPY --chmod=755 docker/entrypoint.sh /usr/local/bin/pyserver-entrypoint

# HOME and every cache point at /tmp, the one writable place (a tmpfs under
# --read-only); no bytecode is written at run time (pip compiled it).
ENV PATH=/opt/pyserver/bin:$PATH \
    HOME=/tmp \
    XDG_CACHE_HOME=/tmp/.cache \
    XDG_CONFIG_HOME=/tmp/.config \
    TMPDIR=/tmp \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HEALTHCHECK_PORT=8000

# Every engine module loads (the runtime libraries are all there; the
# lib*.so beside them are the C++ cores they link), and the command starts.
RUN python -c "import importlib, pkgutil, pyserver.engine as e, pyserver.engine.protocol as p; \
[importlib.import_module(m.name) for pkg in (e, p) for m in pkgutil.iter_modules(pkg.__path__, pkg.__name__ + '.') \
 if not m.name.rpartition('.')[2].startswith('lib')]" \
 && /usr/local/bin/pyserver-entrypoint --help >/dev/null \
 && /opt/tritonserver/bin/tritonserver --help >/dev/null

USER 1000:1000
WORKDIR /tmp
# HTTP/REST, gRPC, Prometheus metrics.
EXPOSE 8000 8001 8002
# Ready = every model loaded. With --http-port set to another port, set
# HEALTHCHECK_PORT to it too.
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/v2/health/ready' % os.environ.get('HEALTHCHECK_PORT', '8000'), timeout=4)"]
ENTRYPOINT ["/usr/local/bin/pyserver-entrypoint"]
CMD ["--model-repository=/models"]

# Last, so a new revision or date does not invalidate the layers above.
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=unknown
ARG BASE_IMAGE
LABEL org.opencontainers.image.title="pyserver" \
      org.opencontainers.image.description="Triton-Inference-Server-compatible inference server (CPU)" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="${BASE_IMAGE}"
