#!/usr/bin/env bash
# bootstrap.sh - install, from Debian's packages, whatever parley needs to
# build and test that is not installed yet. Does nothing when all is there.
#
#   tools/bootstrap.sh            build + test dependencies
#   tools/bootstrap.sh --fuzz     also clang and its runtimes, for PARLEY_FUZZ=ON
set -euo pipefail

packages=(
    # toolchain and build
    gcc make cmake pkg-config
    # the fixed libraries: event loops, JSON, WebSocket framing, TLS, unit tests
    libuv1-dev libjansson-dev libwslay-dev libmbedtls-dev check
    # llhttp ships as C sources under /usr/share/llhttp; the build compiles them
    node-llhttp
    # integration tests talk to a real server with real clients (openssl:
    # TLS handshakes and test certificates)
    curl python3 openssl
    # HTTP benchmarks (tools/bench_http.sh)
    wrk
)
if [ "${1:-}" = "--fuzz" ]; then
    packages+=(clang libclang-rt-14-dev)
elif [ $# -gt 0 ]; then
    echo "usage: tools/bootstrap.sh [--fuzz]" >&2
    exit 2
fi

missing=()
for p in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
        missing+=("$p")
    fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "bootstrap: installing ${missing[*]}" >&2
sudo=()
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "bootstrap: need root or sudo to install ${missing[*]}" >&2; exit 1; }
    sudo=(sudo)
fi
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
