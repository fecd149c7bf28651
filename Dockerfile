# neardup: one process, one worker, data on a volume.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    NEARDUP_HOST=0.0.0.0 \
    NEARDUP_PORT=8000 \
    NEARDUP_DATA_DIR=/data \
    NUMBA_CACHE_DIR=/app/numba-cache

RUN useradd --create-home --uid 10001 neardup \
    && mkdir -p /data /app \
    && chown neardup:neardup /data

WORKDIR /app

# Dependencies first, in their own layer: a code change does not reinstall them.
COPY pyproject.toml README.md ./
# The redis extra: redis-py and hiredis, for NEARDUP_BACKEND=redis://... (docs/redis.md).
RUN mkdir -p app && touch app/__init__.py \
    && pip install '.[redis]' \
    && pip uninstall -y neardup \
    && rm -rf app

COPY app ./app
# The client package: `neardup search` and `neardup insert`, built on it, live in the same command.
COPY neardup_client ./neardup_client
# Compile the numba kernels now, into NUMBA_CACHE_DIR: a start loads them instead of
# compiling them (some 20 s). `neardup warm-up` imports the installed package, as
# `neardup serve` does (numba's cache is keyed on the source's path and contents, and on
# the CPU: on another CPU model than the build machine's, the first start compiles again).
# numba uses a cache directory only if it can write to it: the user that serves owns it,
# and group 0, that of a uid given with --user, may write to it too.
RUN pip install --no-deps . \
    && neardup warm-up \
    && chown -R neardup:0 "$NUMBA_CACHE_DIR" \
    && chmod -R g=u "$NUMBA_CACHE_DIR"

USER neardup
VOLUME ["/data"]
EXPOSE 8000

HEALTHCHECK --interval=10s --timeout=3s --start-period=120s --retries=3 \
    CMD python -c "import sys, urllib.request; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8000/readyz', timeout=2).status == 200 else 1)"

# Exactly one worker: the indexes live in this process (see docs/design.md). With
# NEARDUP_BACKEND (Redis) the process holds nothing: run as many containers as wanted.
CMD ["neardup", "serve"]
