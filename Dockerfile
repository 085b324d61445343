# tritonchat in NVIDIA's Triton containers, installed once, at build time.
#
#   docker build -t tritonchat:25.12-vllm .                                  # vLLM backend
#   docker build --build-arg FLAVOR=trtllm -t tritonchat:25.12-trtllm .      # TensorRT-LLM
#   docker build --build-arg TRITON_VERSION=25.06 --build-arg EXTRAS=grpc .  # another release,
#                                                                            # with the gRPC transport
#
# The package goes into the container's Python without changing any package NVIDIA installed
# (docker/install.py fails the build otherwise). The model repository is at
# /opt/tritonchat/model_repository; docker-compose.yml and deploy/kubernetes write a runnable
# copy of it with `python3 -m tritonchat.repository` at start.
ARG TRITON_VERSION=25.12
ARG FLAVOR=vllm
FROM nvcr.io/nvidia/tritonserver:${TRITON_VERSION}-${FLAVOR}-python-py3

# Optional extras of the package: "grpc" for `transport: grpc` (tritonclient, grpcio, protobuf).
ARG EXTRAS=""
ENV PIP_BREAK_SYSTEM_PACKAGES=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HUB_OFFLINE=1

WORKDIR /opt/tritonchat
COPY pyproject.toml README.md ./
COPY src/ src/
COPY model_repository/ model_repository/
COPY docker/ docker/
RUN python3 docker/install.py --constraints docker/constraints.txt ".${EXTRAS:+[${EXTRAS}]}" \
 && python3 -c "import tritonchat.service, tritonchat.triton.model, aiohttp, partial_json_parser"

WORKDIR /
EXPOSE 8000 8001 8002
