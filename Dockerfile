# syntax=docker/dockerfile:1
# The chaosflow controller image (used by charts/chaosflow):
#   docker build -t chaosflow:0.1.0 .
#   docker run --rm chaosflow:0.1.0 --help
# Dependencies are installed at the versions pinned in constraints.txt.

FROM python:3.11-slim AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/chaosflow
WORKDIR /src
# Dependencies first (cached while only the sources change): the pinned versions of the
# project's runtime dependencies, read from pyproject.toml and constraints.txt.
COPY pyproject.toml constraints.txt README.md ./
RUN python -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))' > /tmp/requirements.txt \
 && /opt/chaosflow/bin/pip install -r /tmp/requirements.txt -c constraints.txt
COPY engine ./engine
COPY templates ./templates
COPY actors ./actors
COPY triggers ./triggers
RUN /opt/chaosflow/bin/pip install --no-deps -c constraints.txt . \
 && /opt/chaosflow/bin/chaosflow --help >/dev/null

FROM python:3.11-slim
# Non-root (the chart runs it with runAsNonRoot and a read-only root filesystem; /tmp is an emptyDir).
RUN groupadd --system --gid 10001 chaosflow \
 && useradd --system --uid 10001 --gid 10001 --home-dir /nonexistent --no-create-home \
      --shell /usr/sbin/nologin chaosflow
COPY --from=build /opt/chaosflow /opt/chaosflow
ENV PATH=/opt/chaosflow/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 10001:10001
WORKDIR /tmp
# /healthz, /readyz and /metrics (chaosflow controller --health-addr).
EXPOSE 8080
ENTRYPOINT ["chaosflow"]
CMD ["controller"]
