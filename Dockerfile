# neardup: one process, one worker, data on a volume.
#
# Two stages: the first installs the server's dependencies and neardup into a virtual
# environment and compiles the numba kernels; the second is the base image with that
# environment copied in, nothing else (no pip, no build files, no batch-job packages:
# pyarrow and pyspark are `neardup dedup`'s, installed with the batch and spark extras).
# Both stages use the same base and the same paths: the environment's interpreter is the
# base's, and numba's cache is keyed on the sources' paths.
FROM python:3.11-slim AS build

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    NUMBA_CACHE_DIR=/opt/neardup/numba-cache

RUN python -m venv /opt/neardup
ENV PATH=/opt/neardup/bin:$PATH
WORKDIR /src

# Dependencies first, in their own layer: a change of the code or of the README (the
# package's description, an empty stand-in here) does not reinstall them.
COPY pyproject.toml ./
# The redis extra: redis-py and hiredis, for NEARDUP_BACKEND=redis://... (docs/redis.md).
RUN mkdir -p app && touch app/__init__.py README.md \
    && pip install '.[redis]' \
    && pip uninstall -y neardup \
    && rm -rf app

COPY README.md ./
COPY app ./app
# The client package: `neardup search` and `neardup insert`, built on it, live in the same command.
COPY neardup_client ./neardup_client
# Installed (not editable), then the kernels compiled into NUMBA_CACHE_DIR: a start loads
# them instead of compiling them (a minute or more). On another CPU model than the build
# machine's, the first start compiles again. pip and setuptools go: nothing installs at
# run time. numba uses a cache directory only if it can write to it: the user that serves
# will own it, and group 0, that of a uid given with --user, may write to it too.
RUN pip install --no-deps . \
    && neardup warm-up \
    && pip uninstall -y -q pip setuptools \
    && chmod -R g=u /opt/neardup


FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/neardup/bin:$PATH \
    NEARDUP_HOST=0.0.0.0 \
    NEARDUP_PORT=8000 \
    NEARDUP_DATA_DIR=/data \
    NUMBA_CACHE_DIR=/opt/neardup/numba-cache

RUN useradd --create-home --uid 10001 neardup \
    && mkdir -p /data \
    && chown neardup:neardup /data

COPY --from=build --chown=neardup:0 /opt/neardup /opt/neardup

USER neardup
WORKDIR /data
VOLUME ["/data"]
EXPOSE 8000

HEALTHCHECK --interval=10s --timeout=3s --start-period=120s --retries=3 \
    CMD python -c "import sys, urllib.request; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8000/readyz', timeout=2).status == 200 else 1)"

# Exactly one worker: the indexes live in this process (see docs/design.md). With
# NEARDUP_BACKEND (Redis) the process holds nothing: run as many containers as wanted.
CMD ["neardup", "serve"]
