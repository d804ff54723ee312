#!/usr/bin/env bash
# Sourced by demo.sh and test.sh: makes sure the tools the build needs beyond Rust
# and a C compiler are present. protoc generates the etcd and gRPC client code at
# build time; etcd is started by the cluster tests (which skip, loudly, without it).
# Installs Debian's packages when it can (root or sudo), else says what to install.

puffer_as_root() {
    if [[ "$(id -u)" -eq 0 ]]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        return 1
    fi
}

puffer_need_packages() {
    local missing=()
    command -v protoc >/dev/null 2>&1 || missing+=(protobuf-compiler)
    if [[ "${1:-}" == "--with-etcd" ]]; then
        command -v etcd >/dev/null 2>&1 || missing+=(etcd-server)
    fi
    [[ ${#missing[@]} -eq 0 ]] && return 0
    echo "== installing ${missing[*]} (Debian packages)" >&2
    if command -v apt-get >/dev/null 2>&1 &&
        puffer_as_root apt-get update -qq &&
        DEBIAN_FRONTEND=noninteractive puffer_as_root apt-get install -y -qq "${missing[@]}"; then
        return 0
    fi
    echo "PufferDB needs: ${missing[*]} (protoc builds the etcd and gRPC clients)." >&2
    echo "Install them with your package manager, or set PROTOC to a protoc binary." >&2
    [[ -n "${PROTOC:-}" ]] || command -v protoc >/dev/null 2>&1
}

# The S3 tests of deep storage run against moto's standalone S3 server (PyPI), kept
# in a virtualenv of its own under target/; exports PUFFER_MOTO_BIN. Without Python's
# venv the S3 tests skip, loudly (and fail in CI, which sets PUFFER_REQUIRE_SERVICES).
puffer_need_moto() {
    local venv="$1/target/motoenv"
    if [[ ! -x "$venv/bin/moto_server" ]]; then
        echo "== installing moto[server] into $venv (the S3 server of the deep-storage tests)" >&2
        if ! { python3 -m venv "$venv" &&
            "$venv/bin/pip" install -q 'moto[server]==5.2.5'; }; then
            echo "warning: could not install moto; the S3 tests will skip" >&2
            return 0
        fi
    fi
    export PUFFER_MOTO_BIN="$venv/bin/moto_server"
}
