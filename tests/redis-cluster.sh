#!/usr/bin/env bash
# A throwaway Redis Cluster of three masters on 127.0.0.1, for the
# redis+cluster:// tests (Rust: host-native/tests/it/redis_cluster.rs,
# Python: python/tests/test_redis_cluster.py).
#
#   tests/redis-cluster.sh start DIR   starts 3 redis-server --cluster-enabled
#                                      yes on free ports, files in DIR, joins
#                                      them with redis-cli --cluster create,
#                                      waits for cluster_state:ok and prints
#                                      the ports, one line, space-separated
#   tests/redis-cluster.sh stop DIR    kills the servers started in DIR
#
# With TZR_CLUSTER_TLS=CERTDIR (holding ca.pem, server.pem and server.key)
# the nodes speak only TLS, to clients and to each other; with
# TZR_CLUSTER_PASSWORD=PW they require it (requirepass, masterauth).
#
# Persistence is off; each node's pid, log and nodes.conf stay in DIR/PORT/.
# Needs redis-server and redis-cli (Debian: apt-get install redis-server).
set -euo pipefail

MASTERS=3

usage() {
    echo "usage: $0 start|stop DIR" >&2
    exit 2
}

[ $# -eq 2 ] || usage
action=$1
dir=$2

# Extra arguments of every redis-server and redis-cli call.
server_extra=()
cli=(redis-cli)
if [ -n "${TZR_CLUSTER_TLS:-}" ]; then
    certs=$TZR_CLUSTER_TLS
    server_extra+=(--tls-cluster yes --tls-cert-file "$certs/server.pem" --tls-key-file "$certs/server.key"
        --tls-ca-cert-file "$certs/ca.pem" --tls-auth-clients no)
    cli+=(--tls --cacert "$certs/ca.pem")
fi
if [ -n "${TZR_CLUSTER_PASSWORD:-}" ]; then
    server_extra+=(--requirepass "$TZR_CLUSTER_PASSWORD" --masterauth "$TZR_CLUSTER_PASSWORD")
    cli+=(-a "$TZR_CLUSTER_PASSWORD" --no-auth-warning)
fi

# Two free ports: the client port and the cluster bus port (which would
# otherwise be the client port + 10000, possibly above 65535 or taken).
free_ports() {
    python3 -c '
import socket
socks = [socket.socket() for _ in range(2)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))'
}

stop() {
    local pidfile pid
    for pidfile in "$dir"/*/redis.pid; do
        [ -e "$pidfile" ] || continue
        pid=$(cat "$pidfile")
        kill "$pid" 2>/dev/null || true
    done
    for pidfile in "$dir"/*/redis.pid; do
        [ -e "$pidfile" ] || continue
        pid=$(cat "$pidfile")
        for _ in $(seq 100); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.05
        done
        kill -9 "$pid" 2>/dev/null || true
        rm -f "$pidfile"
    done
}

start() {
    command -v redis-server >/dev/null && command -v redis-cli >/dev/null || {
        echo "redis-server and redis-cli are required" >&2
        exit 1
    }
    mkdir -p "$dir"
    local ports=() port bus node
    for _ in $(seq "$MASTERS"); do
        read -r port bus < <(free_ports)
        node="$dir/$port"
        mkdir -p "$node"
        if [ -n "${TZR_CLUSTER_TLS:-}" ]; then
            listen=(--port 0 --tls-port "$port")
        else
            listen=(--port "$port")
        fi
        redis-server "${listen[@]}" --cluster-port "$bus" --bind 127.0.0.1 --cluster-enabled yes \
            --cluster-config-file "$node/nodes.conf" --cluster-node-timeout 2000 \
            --save "" --appendonly no --dir "$node" --logfile "$node/redis.log" \
            --pidfile "$node/redis.pid" --daemonize yes "${server_extra[@]}"
        ports+=("$port")
    done
    for port in "${ports[@]}"; do
        for _ in $(seq 200); do
            [ "$("${cli[@]}" -p "$port" ping 2>/dev/null)" = PONG ] && break
            sleep 0.025
        done
    done
    local nodes=()
    for port in "${ports[@]}"; do nodes+=("127.0.0.1:$port"); done
    # redis-cli waits for the nodes to meet without a deadline of its own.
    timeout 60 "${cli[@]}" --cluster create "${nodes[@]}" --cluster-replicas 0 --cluster-yes >"$dir/create.log" 2>&1 || {
        cat "$dir/create.log" >&2
        stop
        exit 1
    }
    for port in "${ports[@]}"; do
        local ok=0
        for _ in $(seq 400); do
            if "${cli[@]}" -p "$port" cluster info 2>/dev/null | grep -q '^cluster_state:ok'; then
                ok=1
                break
            fi
            sleep 0.025
        done
        if [ "$ok" = 0 ]; then
            echo "node $port did not reach cluster_state:ok" >&2
            stop
            exit 1
        fi
    done
    echo "${ports[*]}"
}

case "$action" in
start) start ;;
stop) stop ;;
*) usage ;;
esac
