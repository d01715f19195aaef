#!/bin/sh
# One Redis Cluster of the compose `cluster` profile, in one container: six
# redis-server processes, three primaries with one replica each, created
# with `redis-cli --cluster create`. Every process listens on the port the
# host maps to it and announces 127.0.0.1, so the addresses in CLUSTER
# SLOTS and in MOVED replies are right both inside the container and on
# the host. (Cluster bus ports, port + 10000, stay inside.)
#
#   cluster-node.sh PORT PORT PORT PORT PORT PORT
#
# Every start is a fresh cluster (no persistence, nodes.conf emptied).
# /tmp/ready is non-empty once every node reports cluster_state:ok and sees
# every replica, and every replica is in sync with its primary.
set -eu
# Shell builtins and redis binaries only: the local image has no coreutils
# but `sleep`.
dir=/data
: >/tmp/ready

pids=
trap 'kill $pids 2>/dev/null; wait; exit 0' TERM INT
# Waits (a minute at most) until "$@" succeeds.
await() {
    i=0
    until "$@"; do
        i=$((i + 1))
        [ "$i" -lt 600 ] || { echo "cluster $1: gave up waiting for: $*" >&2; exit 1; }
        sleep 0.1
    done
}
pong() { [ "$(redis-cli -p "$1" ping 2>/dev/null)" = PONG ]; }
# Node $1 reports the cluster ok, sees every replica, and is either a
# primary or a replica in sync.
ok() {
    case $(redis-cli -p "$1" cluster info) in
        *cluster_state:ok*) ;;
        *) return 1 ;;
    esac
    n=0
    for word in $(redis-cli -p "$1" cluster nodes); do
        case $word in *slave*) n=$((n + 1)) ;; esac
    done
    [ "$n" -eq "$replicas" ] || return 1
    case $(redis-cli -p "$1" info replication) in
        *role:master* | *master_link_status:up*) return 0 ;;
    esac
    return 1
}

replicas=$(($# / 2))
nodes=
for port in "$@"; do
    : >"$dir/nodes-$port.conf" # empty: a new node, also on a restart
    redis-server --port "$port" --save "" --appendonly no --protected-mode no \
        --maxmemory-policy noeviction --dir "$dir" \
        --cluster-enabled yes --cluster-config-file "nodes-$port.conf" \
        --cluster-announce-ip 127.0.0.1 --cluster-node-timeout 2000 &
    pids="$pids $!"
    nodes="$nodes 127.0.0.1:$port"
done
for port in "$@"; do
    await pong "$port"
done
# shellcheck disable=SC2086 # one argument per node
redis-cli --cluster create $nodes --cluster-replicas 1 --cluster-yes >"$dir/create.log" 2>&1 ||
    { cat "$dir/create.log" >&2; exit 1; }
for port in "$@"; do
    await ok "$port"
done
echo ready >/tmp/ready
echo "cluster on $*: ready"
wait
