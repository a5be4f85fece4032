# syntax=docker/dockerfile:1
# The gateway image: slim, non-root, runs offline (the tokenizer is baked in), config by mounted file.
#
#   make docker                      # or: docker build -t gateway:local .
#   docker run -p 8080:8080 -v $PWD/config.toml:/etc/gateway/gateway.toml:ro gateway:local
#
# The o200k_base rank file: if deploy/tiktoken/ holds it (`make docker` copies it there from
# ../shared/tiktoken, for air-gapped builds), it is used as is; otherwise it is downloaded here,
# at build time. Either way its sha256 is checked, and the image never downloads at run time.

ARG PYTHON_VERSION=3.11

FROM python:${PYTHON_VERSION}-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN python -m venv /opt/venv
COPY pyproject.toml README.md ./
COPY gateway ./gateway
RUN /opt/venv/bin/pip install .

FROM python:${PYTHON_VERSION}-slim AS tokenizer
# tiktoken's cache key for o200k_base: the sha1 of its download URL.
ARG O200K_URL=https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken
ARG O200K_FILE=fb374d419588a4632f3f557e76b4b70aebbca790
ARG O200K_SHA256=446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d
COPY deploy/tiktoken/ /tiktoken/
RUN set -eu; \
    f="/tiktoken/${O200K_FILE}"; \
    if [ ! -s "$f" ]; then \
      python -c 'import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])' "$O200K_URL" "$f"; \
    fi; \
    echo "${O200K_SHA256}  $f" | sha256sum -c -; \
    find /tiktoken -type f ! -name "${O200K_FILE}" -delete

FROM python:${PYTHON_VERSION}-slim
LABEL org.opencontainers.image.title="gateway" \
      org.opencontainers.image.description="OpenAI-compatible routing proxy that measures every response it relays"
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    TIKTOKEN_CACHE_DIR=/opt/gateway/tiktoken \
    GATEWAY_CONFIG=/etc/gateway/gateway.toml
RUN groupadd --system --gid 10001 gateway \
 && useradd --system --uid 10001 --gid gateway --home-dir /nonexistent --shell /usr/sbin/nologin gateway
COPY --from=build /opt/venv /opt/venv
COPY --from=tokenizer /tiktoken/ /opt/gateway/tiktoken/
# Prove at build time that the encoding loads with no network at all.
RUN --network=none python -c "import tiktoken; assert tiktoken.get_encoding('o200k_base').encode('hello world')"
USER 10001:10001
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=15s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2)"]
ENTRYPOINT ["gateway"]
# The listen address is fixed here (EXPOSE and HEALTHCHECK rely on it); the rest comes from the mounted file.
CMD ["serve", "--host", "0.0.0.0", "--port", "8080"]
