# syntax=docker/dockerfile:1
# The poolwatch sidecar: `poolwatch serve` on port 9464, as a non-root user, without torch; amd64 and arm64.
# Stage 1 runs on the build machine's own platform: it installs the released wheel (dist/, made by
# `python -m build`) and its dependencies' wheels *for the target platform* into the venv /opt/poolwatch
# (poolwatch is pure Python; pydantic-core and PyYAML come as the target's manylinux wheels), so no
# target-architecture code runs during the build. Stage 2 is the target's base plus that venv.
#   scripts/release (or scripts/build_image.sh): both architectures with buildah, no Docker daemon
#   docker buildx build --platform linux/amd64,linux/arm64 --build-arg VERSION=<version> .
ARG BASE=python:3.11-slim-bookworm
ARG BUILD_BASE=python:3.11-slim-bookworm

FROM --platform=$BUILDPLATFORM ${BUILD_BASE} AS build
ARG TARGETARCH
ARG VERSION
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_ROOT_USER_ACTION=ignore
COPY dist/poolwatch-${VERSION}-py3-none-any.whl /wheels/
SHELL ["/bin/sh", "-eu", "-c"]
RUN case "${TARGETARCH}" in amd64) m=x86_64 ;; arm64) m=aarch64 ;; *) echo "no wheels for ${TARGETARCH}"; exit 1 ;; esac; \
    set -- --platform "manylinux2014_$m"; \
    for glibc in $(seq 17 36); do set -- "$@" --platform "manylinux_2_${glibc}_$m"; done; \
    python3 -m venv --without-pip /opt/poolwatch; \
    python3 -m venv /tmp/pip; \
    site=/opt/poolwatch/lib/python3.11/site-packages; \
    /tmp/pip/bin/pip install --only-binary=:all: "$@" --python-version 3.11 --implementation cp \
        --target "$site" "/wheels/poolwatch-${VERSION}-py3-none-any.whl"; \
    for script in "$site"/bin/*; do \
        sed '1s|^#!.*|#!/opt/poolwatch/bin/python|' "$script" > "/opt/poolwatch/bin/${script##*/}"; \
        chmod 755 "/opt/poolwatch/bin/${script##*/}"; \
    done; \
    rm -r "${site:?}/bin"; \
    /opt/poolwatch/bin/python -c "import importlib.metadata as m; assert m.version('poolwatch') == '${VERSION}'"

FROM ${BASE}
ARG VERSION
ARG REVISION=unknown
LABEL org.opencontainers.image.title="poolwatch" \
      org.opencontainers.image.description="Memory-pool conservation sidecar for SGLang: Prometheus metrics, alerts and a status page" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/poolwatch/poolwatch" \
      org.opencontainers.image.documentation="https://github.com/poolwatch/poolwatch/blob/main/docs/deploy.md"
COPY --from=build /opt/poolwatch /opt/poolwatch
ENV PATH=/opt/poolwatch/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 65532:65532
EXPOSE 9464
CMD ["poolwatch", "serve"]
