#!/usr/bin/env bash
# bootstrap.sh - install, from Debian's packages, whatever parley needs to
# build and test that is not installed yet. Does nothing when all is there.
#
#   tools/bootstrap.sh            build + test dependencies
#   tools/bootstrap.sh --fuzz     also clang and its runtimes, for PARLEY_FUZZ=ON
#   tools/bootstrap.sh --bench    also redis-server and redis-tools, for the
#                                 side-by-side benchmark (bench/side_by_side.py)
# The options combine: tools/bootstrap.sh --fuzz --bench.
set -euo pipefail

packages=(
    # toolchain and build
    gcc make cmake pkg-config
    # the fixed libraries: event loops, JSON, WebSocket framing, TLS, unit tests
    libuv1-dev libjansson-dev libwslay-dev libmbedtls-dev check
    # the parley command's malloc (README, "Dependencies": the append path's
    # allocations cost a third less CPU than glibc's malloc)
    libmimalloc-dev
    # llhttp ships as C sources under /usr/share/llhttp; the build compiles them
    node-llhttp
    # integration tests talk to a real server with real clients (openssl:
    # TLS handshakes and test certificates)
    curl python3 openssl
    # WebSocket interop tests: Python's websockets (Debian; run with /usr/bin/python3)
    python3-websockets
    # the web pages' tests open them in a real browser (headless; Debian's
    # own build, driven by playwright-core from tests/node)
    chromium
    # HTTP benchmarks (tools/bench_http.sh)
    wrk
    # the NATS JetStream store (--store nats://): the C client to build it,
    # the server for the tests, which start their own cluster on free ports
    # (tests/integration/nats_cluster.py); the system's service is not used
    nats-server libnats-dev
)
# node and npm for the `ws` test client (tests/node); a node that is there
# already (from any source) is used as it is
if ! command -v npm >/dev/null; then
    packages+=(nodejs npm)
fi
for opt in "$@"; do
    case "$opt" in
        --fuzz) packages+=(clang libclang-rt-14-dev) ;;
        # the benchmark starts redis-server itself, on a scratch directory and
        # a port of its own; it never uses the system's redis service
        --bench) packages+=(redis-server redis-tools) ;;
        *) echo "usage: tools/bootstrap.sh [--fuzz] [--bench]" >&2; exit 2 ;;
    esac
done

missing=()
for p in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
        missing+=("$p")
    fi
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "bootstrap: installing ${missing[*]}" >&2
    sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null || { echo "bootstrap: need root or sudo to install ${missing[*]}" >&2; exit 1; }
        sudo=(sudo)
    fi
    "${sudo[@]}" apt-get update -qq
    # With a policy-rc.d that exits 101, the packages' maintainer scripts do
    # not start their services (redis-server's or nats-server's would fail,
    # or linger, in a container without systemd). One that is there already
    # is kept.
    policy=/usr/sbin/policy-rc.d
    own_policy=0
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' | "${sudo[@]}" tee "$policy" >/dev/null
        "${sudo[@]}" chmod 755 "$policy"
        own_policy=1
        trap '"${sudo[@]}" rm -f "$policy"' EXIT
    fi
    rc=0
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2 || rc=$?
    if [ "$rc" -ne 0 ]; then
        # a service that failed to start leaves its package half-configured:
        # configure again, then judge by what is installed
        echo "bootstrap: apt-get install exited $rc; configuring again" >&2
        "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive dpkg --configure -a >&2 || true
    fi
    if [ "$own_policy" = 1 ]; then
        "${sudo[@]}" rm -f "$policy"
        trap - EXIT
    fi
    for p in "${missing[@]}"; do
        if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
            echo "bootstrap: $p did not install (apt-get install exited $rc)" >&2
            exit 1
        fi
    done
fi

root="$(cd "$(dirname "$0")/.." && pwd)"

# A newer nats-server for the tests, beside Debian 12's 2.9.10: Debian 13's
# package (2.10), fetched by apt from Debian's archive, whose signature apt
# checks with Debian 12's own keyring (debian-archive-keyring carries
# Debian 13's keys), and unpacked into tests/nats-newer/. It is not
# installed: the system's nats-server stays Debian 12's. The NATS suites run
# on both (CMakeLists.txt, *_nats_newer).
newer="$root/tests/nats-newer"
if [ ! -x "$newer/usr/sbin/nats-server" ]; then
    echo "bootstrap: Debian 13's nats-server package into tests/nats-newer" >&2
    tmp="$(mktemp -d)"
    mkdir -p "$tmp/lists/partial" "$tmp/cache/archives/partial"
    echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg]" \
        "http://deb.debian.org/debian trixie main" > "$tmp/sources.list"
    apt_opts=(-qq -o Dir::Etc::SourceList="$tmp/sources.list" -o Dir::Etc::SourceParts=/dev/null
              -o Dir::State::Lists="$tmp/lists" -o Dir::Cache="$tmp/cache"
              -o Debug::NoLocking=1 -o APT::Sandbox::User="$(id -un)")
    apt-get "${apt_opts[@]}" update >&2
    (cd "$tmp" && apt-get "${apt_opts[@]}" download nats-server >&2)
    rm -rf "$newer.tmp"
    dpkg -x "$tmp"/nats-server_*.deb "$newer.tmp"
    rm -rf "$tmp" "$newer"
    mv "$newer.tmp" "$newer"
    echo "bootstrap: $("$newer/usr/sbin/nats-server" --version) in tests/nats-newer" >&2
fi

# the npm test clients, at the versions package-lock.json pins
node_dir="$root/tests/node"
stamp="$node_dir/node_modules/.parley-lock"
if ! cmp -s "$node_dir/package-lock.json" "$stamp" 2>/dev/null; then
    echo "bootstrap: npm ci in tests/node" >&2
    npm ci --prefix "$node_dir" --no-audit --no-fund --loglevel=error >&2
    cp "$node_dir/package-lock.json" "$stamp"
fi
