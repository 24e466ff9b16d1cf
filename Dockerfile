# ServeDeck production image: uvicorn (python -m console.serve) serving the console, the REST API,
# WebSockets and /v1.
# Configure it with DATABASE_URL, REDIS_URL, SECRET_KEY, ALLOWED_HOSTS and HTTPS=true.
FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /venv
COPY requirements.txt /tmp/requirements.txt
COPY requirements/no-deps.txt /tmp/no-deps.txt
COPY client /tmp/client
# Only the runtime part of requirements.txt: everything above the "Tests and tooling" line; the
# client package (whose presenter the commands use) installed, not linked to the build's copy.
# Then boto3 without its dependencies (requirements/no-deps.txt says why).
RUN sed -e '/^# Tests and tooling/,$d' -e 's|^-e ./client$|./client|' /tmp/requirements.txt \
      > /tmp/runtime.txt \
 && sed -e '/^# Tests and tooling/,$d' /tmp/no-deps.txt > /tmp/runtime-no-deps.txt \
 && cd /tmp && /venv/bin/pip install -r /tmp/runtime.txt \
 && /venv/bin/pip install --no-deps -r /tmp/runtime-no-deps.txt

FROM python:3.11-slim
ENV PATH=/venv/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 \
    DJANGO_SETTINGS_MODULE=console.settings SERVEDECK_VAR_DIR=/var/lib/servedeck
# The runtime user owns only its data folder (private, 0700); the code stays root's, read-only.
RUN useradd --system --uid 10001 --home-dir /var/lib/servedeck --no-create-home servedeck \
 && mkdir -p /var/lib/servedeck && chown servedeck /var/lib/servedeck \
 && chmod 0700 /var/lib/servedeck
COPY --from=build /venv /venv
WORKDIR /app
COPY manage.py pyproject.toml ./
COPY console ./console
COPY accesspolicies ./accesspolicies
COPY jobs ./jobs
COPY models_catalog ./models_catalog
COPY templates ./templates
COPY static ./static
# collectstatic needs a key to import settings; this throwaway one never leaves the build.
RUN SECRET_KEY=collectstatic-only-$(python -c "import secrets; print(secrets.token_hex(32))") \
    python manage.py collectstatic --noinput \
 && chown -R root:root /app && chmod -R go-w,a+rX /app
USER servedeck
EXPOSE 8000
HEALTHCHECK CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz')"
CMD ["sh", "-c", "python manage.py migrate --noinput && exec python -m console.serve -b 0.0.0.0 -p 8000 console.asgi:application"]
