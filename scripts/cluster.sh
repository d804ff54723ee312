#!/usr/bin/env bash
# A PufferDB cluster on this machine: etcd, three data nodes and a broker on loopback,
# each with its own data directory under target/cluster/, deep storage in
# target/cluster/deep.
#   bash scripts/cluster.sh up       builds puffer, starts etcd, n1, n2, n3 and broker
#   bash scripts/cluster.sh status   what etcd and each node say
#   bash scripts/cluster.sh down     stops them all (data stays; rm -r target/cluster)
# n1 and n2 may lead ingest and coordination (n1 is first, so it leads at start);
# n1..n3 hold data. Every node serves HTTP and takes reads and writes (writes are
# handed to the ingest leader); the broker holds no data and fans reads out:
#   curl -s http://127.0.0.1:7880/v1/admin/cluster
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
target_dir="${CARGO_TARGET_DIR:-target}"
case "$target_dir" in /*) ;; *) target_dir="$repo_root/$target_dir" ;; esac
puffer="$target_dir/release/puffer"
home="$target_dir/cluster"
etcd_client=23791
etcd_peer=23801
nodes=(n1 n2 n3 broker)
http_ports=(7881 7882 7883 7880)
rpc_ports=(8881 8882 8883 8880)
roles=(coordinator,ingest,indexer,data coordinator,ingest,indexer,data data broker)

running() { [[ -f "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

wait_http() { # url, seconds
    for _ in $(seq 1 $(($2 * 10))); do
        curl -sf "$1" >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    return 1
}

up() {
    # shellcheck source=scripts/prerequisites.sh
    source "$repo_root/scripts/prerequisites.sh"
    puffer_need_packages --with-etcd
    command -v etcd >/dev/null || { echo "cluster.sh: etcd is missing (Debian: etcd-server)" >&2; exit 1; }
    echo "== building the release binary"
    cargo build --release -p puffer --bin puffer
    mkdir -p "$home"
    if running "$home/etcd.pid"; then
        echo "== etcd already runs (pid $(cat "$home/etcd.pid"))"
    else
        echo "== starting etcd on 127.0.0.1:$etcd_client"
        etcd --name puffer --data-dir "$home/etcd" \
            --listen-client-urls "http://127.0.0.1:$etcd_client" \
            --advertise-client-urls "http://127.0.0.1:$etcd_client" \
            --listen-peer-urls "http://127.0.0.1:$etcd_peer" \
            --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer" \
            --initial-cluster "puffer=http://127.0.0.1:$etcd_peer" \
            >"$home/etcd.log" 2>&1 &
        echo $! >"$home/etcd.pid"
        wait_http "http://127.0.0.1:$etcd_client/health" 20 ||
            { echo "etcd did not start; see $home/etcd.log" >&2; exit 1; }
    fi
    for i in "${!nodes[@]}"; do
        local node="${nodes[$i]}"
        if running "$home/$node.pid"; then
            echo "== $node already runs (pid $(cat "$home/$node.pid"))"
            continue
        fi
        echo "== starting $node (${roles[$i]}) on http://127.0.0.1:${http_ports[$i]}"
        "$puffer" serve --data "$home/$node" --listen "127.0.0.1:${http_ports[$i]}" \
            --etcd "127.0.0.1:$etcd_client" --deep-storage "$home/deep" \
            --node-id "$node" --roles "${roles[$i]}" \
            --rpc-listen "127.0.0.1:${rpc_ports[$i]}" \
            >"$home/$node.out" 2>"$home/$node.log" &
        echo $! >"$home/$node.pid"
        wait_http "http://127.0.0.1:${http_ports[$i]}/v1/admin/cluster" 30 ||
            { echo "$node did not start; see $home/$node.log" >&2; exit 1; }
    done
    status
}

status() {
    if running "$home/etcd.pid"; then
        echo "etcd: running (pid $(cat "$home/etcd.pid")) on 127.0.0.1:$etcd_client"
    else
        echo "etcd: stopped"
    fi
    for i in "${!nodes[@]}"; do
        local node="${nodes[$i]}" url="http://127.0.0.1:${http_ports[$i]}/v1/admin/cluster"
        if running "$home/$node.pid"; then
            echo "$node: running (pid $(cat "$home/$node.pid")) on http://127.0.0.1:${http_ports[$i]}"
            curl -s --max-time 5 "$url" | python3 -c '
import json, sys
s = json.load(sys.stdin)
print("    roles %s, published %s, log tail %s, ingest leader %s, coordinator leader %s, members %s" % (
    ",".join(s.get("roles", [])), s.get("published"), s.get("log_tail"),
    s.get("ingest_leader"), s.get("coordinator_leader"),
    [m["node_id"] for m in s.get("members", [])] if isinstance(s.get("members"), list) else s.get("members")))
' || echo "    (no answer)"
        else
            echo "$node: stopped"
        fi
    done
}

down() {
    for node in "${nodes[@]}" etcd; do
        if running "$home/$node.pid"; then
            kill "$(cat "$home/$node.pid")" 2>/dev/null || true
            for _ in $(seq 1 50); do running "$home/$node.pid" || break; sleep 0.1; done
            running "$home/$node.pid" && kill -9 "$(cat "$home/$node.pid")" 2>/dev/null || true
            echo "$node: stopped"
        fi
        rm -f "$home/$node.pid"
    done
}

case "${1:-}" in
    up) up ;;
    down) down ;;
    status) status ;;
    *) echo "usage: bash scripts/cluster.sh up|down|status" >&2; exit 2 ;;
esac
