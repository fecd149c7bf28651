# neardup: one process, one worker, data on a volume.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    NEARDUP_HOST=0.0.0.0 \
    NEARDUP_PORT=8000 \
    NEARDUP_DATA_DIR=/data \
    NUMBA_CACHE_DIR=/tmp/numba-cache

RUN useradd --create-home --uid 10001 neardup \
    && mkdir -p /data /app \
    && chown neardup:neardup /data

WORKDIR /app

# Dependencies first, in their own layer: a code change does not reinstall them.
COPY pyproject.toml README.md ./
RUN mkdir -p app && touch app/__init__.py \
    && pip install . \
    && pip uninstall -y neardup \
    && rm -rf app

COPY app ./app
RUN pip install --no-deps . && python -c "import app.main"

USER neardup
VOLUME ["/data"]
EXPOSE 8000

HEALTHCHECK --interval=10s --timeout=3s --start-period=120s --retries=3 \
    CMD python -c "import sys, urllib.request; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8000/readyz', timeout=2).status == 200 else 1)"

# Exactly one worker: the indexes live in this process (see docs/design.md).
CMD ["neardup", "serve"]
