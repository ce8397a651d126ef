#!/usr/bin/env bash
# scripts/install-deps.sh — installs the Debian packages ember needs to build and test,
# only those that are missing, without questions (as root, or through sudo).
#
#   cmake, ninja-build, gcc, pkg-config   the build
#   clang, libclang-rt-dev                 the libFuzzer target (libFuzzer's runtime is in
#                                          libclang-rt-dev, which clang only recommends)
#   libopenblas-dev                        the cpu backend's GEMM
#   libcmocka-dev                          the unit tests
#   python3-numpy                          generating the conformance table's golden data
#   libcjson-dev                           cJSON: safetensors headers (src/io)
#   zlib1g-dev                             zlib: reading gzip-compressed IDX files (src/io)
#   dataset-fashion-mnist                  Fashion-MNIST, the data ember-train and test_io use
#   ocl-icd-opencl-dev, opencl-c-headers   the opencl backend: the OpenCL ICD loader and headers
#   pocl-opencl-icd, clinfo                PoCL, an OpenCL driver on the CPU (CI runs the opencl
#                                          backend's tests on it); clinfo lists OpenCL devices
#   libsodium-dev                          the remote backend: HMAC-SHA256 challenge-response
#   graphviz                               dot: renders ember-graph --dot's pictures of captured
#                                          graphs (test_graph_show renders its own with it)
#   libtorch-dev                           LibTorch (PyTorch's C++ core): the torch backend, a
#                                          plugin (libember-torch.so) whose kernels are ATen's;
#                                          the tests run the whole table on it. Large (~1 GB)
#   openmpi-bin, libopenmpi-dev            Open MPI: libember-dist's collectives and
#                                          data-parallel training (mpirun runs tests/dist)
#   libvulkan-dev, glslc                   the vulkan backend: the Vulkan loader and headers, and
#                                          the GLSL -> SPIR-V compiler its build runs
#   mesa-vulkan-drivers                    lavapipe, a Vulkan driver on the CPU (CI runs the
#                                          vulkan backend's tests on it)
#   vulkan-validationlayers                the Khronos validation layer (a test runs the table
#                                          under it and fails on any message)
#
# With --bench it also installs what bench/ compares against: python3-torch (PyTorch). Large;
# the tests do not need it.
set -euo pipefail

packages=(cmake ninja-build gcc g++ clang libclang-rt-dev pkg-config libopenblas-dev libcmocka-dev
          python3-numpy libcjson-dev zlib1g-dev dataset-fashion-mnist
          ocl-icd-opencl-dev opencl-c-headers pocl-opencl-icd clinfo libsodium-dev graphviz
          libtorch-dev openmpi-bin libopenmpi-dev
          libvulkan-dev glslc mesa-vulkan-drivers vulkan-validationlayers)
if [ "${1:-}" = "--bench" ]; then
    packages+=(python3-torch)
fi

if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
    echo "install-deps: this script needs Debian or Ubuntu (apt-get, dpkg-query)." >&2
    echo "install-deps: install these yourself: ${packages[*]}" >&2
    exit 1
fi

missing=()
for p in "${packages[@]}"; do
    status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
    [ "$status" = installed ] || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "install-deps: all ${#packages[@]} packages are installed"
    exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
    as_root=()
elif command -v sudo >/dev/null 2>&1; then
    as_root=(sudo)
else
    echo "install-deps: missing ${missing[*]}, and not root and no sudo to install them" >&2
    exit 1
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
${as_root[@]+"${as_root[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get update -qq
${as_root[@]+"${as_root[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    --no-install-recommends -o Dpkg::Use-Pty=0 "${missing[@]}"
