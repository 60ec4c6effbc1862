# syntax=docker/dockerfile:1
# The poolwatch sidecar: `poolwatch serve` on port 9464, as a non-root user, without torch.
# Stage 1 builds the wheel and installs it into a venv; stage 2 is the base image plus that venv.
# Built without a Docker daemon by scripts/build_image.sh (buildah); `docker build .` works too.
ARG BASE=python:3.11-slim-bookworm

FROM ${BASE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_ROOT_USER_ACTION=ignore
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY service/ service/
RUN python3 -m venv /opt/poolwatch \
    && /opt/poolwatch/bin/pip wheel --no-deps --wheel-dir /wheels . \
    && /opt/poolwatch/bin/pip install /wheels/poolwatch-*.whl \
    && /opt/poolwatch/bin/pip uninstall --yes pip setuptools \
    && /opt/poolwatch/bin/poolwatch --version

FROM ${BASE}
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="poolwatch" \
      org.opencontainers.image.description="Memory-pool conservation sidecar for SGLang: Prometheus metrics, alerts and a status page" \
      org.opencontainers.image.version="${VERSION}" \
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
