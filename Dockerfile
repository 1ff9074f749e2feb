# vocabsurgeon in a slim image: CPU torch by default; see README.md "Docker" for the CUDA build.
#   docker build -t vocabsurgeon .
#   docker run --rm -v "$PWD:/work" -v hf-cache:/data vocabsurgeon add --tokens lotr.txt org/model out/
FROM python:3.11-slim

# The wheel index torch comes from: CPU by default (about 200 MB instead of several GB of CUDA
# packages); pass --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu126 for GPUs.
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
ARG TORCH_SPEC="torch>=2.1"

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HOME=/data/hf

# torch first, from its own index, so that installing the package finds it satisfied.
# hadolint ignore=DL3013
RUN pip install --index-url "${TORCH_INDEX}" "${TORCH_SPEC}"

WORKDIR /opt/vocabsurgeon
COPY pyproject.toml README.md ./
COPY vocabsurgeon ./vocabsurgeon
# hadolint ignore=DL3013
RUN pip install ".[plot]" \
    && groupadd --gid 1000 surgeon \
    && useradd --create-home --uid 1000 --gid 1000 surgeon \
    && mkdir -p /data/hf /work \
    && chown -R 1000:1000 /data /work

# Numeric, so that `runAsNonRoot` (Kubernetes) can check it without /etc/passwd.
USER 1000:1000
WORKDIR /work
# The Hugging Face cache (downloads, stored login): keep it in a volume between runs.
VOLUME ["/data"]
ENTRYPOINT ["vocabsurgeon"]
CMD ["--help"]
