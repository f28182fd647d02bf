# The controller image: `python main.py manager|agent|webhook`.
# Non-root, and fine with readOnlyRootFilesystem: no bytecode is written at run time
# (compiled at build time), and anything the program writes (the webhook's
# certificates) goes to a mounted volume (--cert-dir on an emptyDir).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
# Dependencies first, in their own layer: they change less often than the code.
COPY pyproject.toml ./
RUN python - <<'PY' > /tmp/requirements.txt
import tomllib
print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))
PY
RUN pip install -r /tmp/requirements.txt && rm /tmp/requirements.txt

COPY main.py ./
COPY api ./api
COPY runtime ./runtime
COPY internal ./internal
COPY controllers ./controllers
RUN python -m compileall -q /app

RUN useradd --uid 65532 --no-create-home --shell /usr/sbin/nologin nonroot
USER 65532:65532

ENTRYPOINT ["python", "main.py"]
CMD ["manager"]
