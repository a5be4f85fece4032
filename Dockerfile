# The gateway image: slim, non-root, runs offline (the tokenizer ships inside the package), config by
# mounted file. Plain Dockerfile syntax: builds with BuildKit or with the classic builder alike.
#
#   make docker                      # or: docker build -t gateway:local .
#   docker run -p 8080:8080 -v $PWD/config.toml:/etc/gateway/gateway.toml:ro gateway:local

ARG PYTHON_VERSION=3.11

FROM python:${PYTHON_VERSION}-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN python -m venv /opt/venv
COPY pyproject.toml README.md ./
COPY gateway ./gateway
RUN /opt/venv/bin/pip install .

FROM python:${PYTHON_VERSION}-slim
LABEL org.opencontainers.image.title="gateway" \
      org.opencontainers.image.description="OpenAI-compatible routing proxy that measures every response it relays"
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    GATEWAY_CONFIG=/etc/gateway/gateway.toml
RUN groupadd --system --gid 10001 gateway \
 && useradd --system --uid 10001 --gid gateway --home-dir /nonexistent --shell /usr/sbin/nologin gateway
COPY --from=build /opt/venv /opt/venv
# Prove at build time that the pinned encoding loads from the package alone: with tiktoken's cache
# pointed at an empty folder, the shipped rank file (sha256-checked) is what loads, never a download.
RUN TIKTOKEN_CACHE_DIR=/nonexistent python -c \
    "from gateway.tokens import load_token_counter; assert load_token_counter('o200k_base').count('hello world') == 2"
USER 10001:10001
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=15s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2)"]
ENTRYPOINT ["gateway"]
# The listen address is fixed here (EXPOSE and HEALTHCHECK rely on it); the rest comes from the mounted file.
CMD ["serve", "--host", "0.0.0.0", "--port", "8080"]
