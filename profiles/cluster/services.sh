#!/usr/bin/env bash
# The real loopback services of the cluster profile and the integration tests.
#
#   services.sh start s3|postgres|all    install when missing, start, wait until ready (idempotent)
#   services.sh stop  s3|postgres|all    stop, leaving no process behind
#   services.sh status                   one line per service
#   services.sh env                      export lines: S3 endpoint, credentials, bucket, database URL,
#                                        the Prefect API's credentials
#
# S3 is OpenStack Swift with its s3api middleware (single replica, tempauth user
# test:tester / testing); the database is a project-owned PostgreSQL 15 cluster.
# Everything lives under $YOLOQ_SERVICES_DIR (default .yoloq/services) and binds to
# 127.0.0.1 on fixed ports that the YOLOQ_* variables below override.
set -euo pipefail

SERVICES_DIR=$(realpath -m "${YOLOQ_SERVICES_DIR:-.yoloq/services}")
HOST=127.0.0.1

S3_PORT=${YOLOQ_S3_PORT:-18080}
SWIFT_OBJECT_PORT=${YOLOQ_SWIFT_OBJECT_PORT:-16200}
SWIFT_CONTAINER_PORT=${YOLOQ_SWIFT_CONTAINER_PORT:-16201}
SWIFT_ACCOUNT_PORT=${YOLOQ_SWIFT_ACCOUNT_PORT:-16202}
MEMCACHED_PORT=${YOLOQ_MEMCACHED_PORT:-16211}
S3_ACCOUNT=test
S3_USER=tester
S3_SECRET=${YOLOQ_S3_SECRET:-testing}
S3_BUCKET=${YOLOQ_S3_BUCKET:-yoloq}

PG_PORT=${YOLOQ_PG_PORT:-54329}
PG_BIN=${YOLOQ_PG_BIN:-/usr/lib/postgresql/15/bin}
PG_DB=${YOLOQ_PG_DB:-prefect}
PG_USER=${YOLOQ_PG_USER:-prefect}
PG_PASSWORD=${YOLOQ_PG_PASSWORD:-prefect}

S3_DIR=$SERVICES_DIR/s3
PG_DIR=$SERVICES_DIR/postgres
READY_TIMEOUT=${YOLOQ_SERVICES_TIMEOUT:-60}
SWIFT_SERVERS=(account container object proxy)

die() { echo "services.sh: $*" >&2; exit 1; }
say() { echo "services.sh: $*" >&2; }

# ---------------------------------------------------------------- helpers

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"
    elif command -v sudo >/dev/null; then sudo -n "$@"
    else die "need root to run: $*"; fi
}

apt_install() {
    say "installing missing packages: $*"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@" >&2 \
        || die "apt-get install $* failed (is the package index reachable?)"
}

pid_alive() { [ -f "$1" ] && group_alive "$(cat "$1")"; }

# A process group is alive while any member is not a zombie (PID 1 may reap slowly).
group_alive() { ps -eo pgid=,stat= | awk -v g="$1" '$1 == g && $2 !~ /^Z/ {found=1} END {exit !found}'; }

# Stop the process groups started under pid files (each service runs in its own session):
# TERM all, wait, then KILL what is left.
stop_pidfiles() {
    local pidfile pids=() pid
    for pidfile in "$@"; do [ -f "$pidfile" ] && pids+=("$(cat "$pidfile")"); done
    for pid in "${pids[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || true; done
    for _ in $(seq 50); do
        local left=0
        for pid in "${pids[@]}"; do group_alive "$pid" && left=1; done
        [ $left -eq 0 ] && break
        sleep 0.1
    done
    for pid in "${pids[@]}"; do
        if group_alive "$pid"; then
            kill -KILL -- "-$pid" 2>/dev/null || true
            sleep 0.5
            group_alive "$pid" && die "process group $pid did not exit"
        fi
    done
    rm -f "$@"
}

# Start a command in its own session, output to a log file, pid recorded.
launch() {
    local name=$1; shift
    setsid "$@" >"$S3_DIR/log/$name.log" 2>&1 < /dev/null &
    echo $! >"$S3_DIR/run/$name.pid"
}

wait_for() {  # wait_for DESCRIPTION LOGFILE COMMAND...
    local what=$1 log=$2; shift 2
    local deadline=$((SECONDS + READY_TIMEOUT))
    until "$@" >/dev/null 2>&1; do
        if [ $SECONDS -ge $deadline ]; then
            say "$what not ready after ${READY_TIMEOUT}s; last lines of $log:"
            tail -n 20 "$log" >&2 2>/dev/null || true
            return 1
        fi
        sleep 0.2
    done
}

port_free() { ! (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }

# ---------------------------------------------------------------- S3 (Swift + s3api)

swift_installed() {
    local cmd
    for cmd in swift-proxy-server swift-object-server swift-container-server \
               swift-account-server swift-ring-builder memcached; do
        command -v "$cmd" >/dev/null || return 1
    done
}

ensure_swift_installed() {
    swift_installed || apt_install swift swift-proxy swift-object swift-container swift-account memcached
    swift_installed || die "swift or memcached still missing after apt-get install"
    # Swift reads its hash path prefix/suffix from /etc/swift/swift.conf only (the Debian
    # package ships one); write a minimal file when it is missing.
    if ! grep -qs '^swift_hash_path_\(suffix\|prefix\)' /etc/swift/swift.conf; then
        say "writing a minimal /etc/swift/swift.conf (hash path prefix/suffix)"
        as_root mkdir -p /etc/swift
        printf '[swift-hash]\nswift_hash_path_suffix = yoloq\nswift_hash_path_prefix = yoloq\n\n[storage-policy:0]\nname = Policy-0\ndefault = yes\n' \
            | as_root tee /etc/swift/swift.conf >/dev/null
    fi
}

write_swift_configs() {
    local etc=$S3_DIR/etc user common
    user=$(id -un)
    mkdir -p "$etc" "$S3_DIR/srv/d1" "$S3_DIR/log" "$S3_DIR/run" "$S3_DIR/cache"
    common="[DEFAULT]
bind_ip = $HOST
workers = 0
user = $user
swift_dir = $etc
devices = $S3_DIR/srv
mount_check = false
log_name = %s
log_level = WARNING
"
    # shellcheck disable=SC2059
    printf "$common" account-server >"$etc/account-server.conf"
    cat >>"$etc/account-server.conf" <<EOF
bind_port = $SWIFT_ACCOUNT_PORT

[pipeline:main]
pipeline = account-server

[app:account-server]
use = egg:swift#account
EOF
    # shellcheck disable=SC2059
    printf "$common" container-server >"$etc/container-server.conf"
    cat >>"$etc/container-server.conf" <<EOF
bind_port = $SWIFT_CONTAINER_PORT

[pipeline:main]
pipeline = container-server

[app:container-server]
use = egg:swift#container
EOF
    # shellcheck disable=SC2059
    printf "$common" object-server >"$etc/object-server.conf"
    cat >>"$etc/object-server.conf" <<EOF
bind_port = $SWIFT_OBJECT_PORT

[pipeline:main]
pipeline = object-server

[app:object-server]
use = egg:swift#object
# No object-updater runs here: give container listings time to update in-line.
container_update_timeout = 30
EOF
    cat >"$etc/proxy-server.conf" <<EOF
[DEFAULT]
bind_ip = $HOST
bind_port = $S3_PORT
workers = 0
user = $user
swift_dir = $etc
log_name = proxy-server
log_level = WARNING

[pipeline:main]
pipeline = catch_errors gatekeeper healthcheck proxy-logging cache listing_formats s3api tempauth copy slo dlo proxy-logging proxy-server

[app:proxy-server]
use = egg:swift#proxy
account_autocreate = true
conn_timeout = 5
node_timeout = 60
# One replica: the proxy's error limiting (10 errors in 60 s, then every request to that
# node is refused for 60 s) would turn a few slow writes on a loaded machine into a
# minute of 503 "Please reduce your request rate".
error_suppression_limit = 1000

[filter:s3api]
use = egg:swift#s3api
location = us-east-1

[filter:tempauth]
use = egg:swift#tempauth
user_${S3_ACCOUNT}_${S3_USER} = $S3_SECRET .admin

[filter:cache]
use = egg:swift#memcache
memcache_servers = $HOST:$MEMCACHED_PORT

[filter:catch_errors]
use = egg:swift#catch_errors
[filter:gatekeeper]
use = egg:swift#gatekeeper
[filter:healthcheck]
use = egg:swift#healthcheck
[filter:proxy-logging]
use = egg:swift#proxy_logging
[filter:listing_formats]
use = egg:swift#listing_formats
[filter:copy]
use = egg:swift#copy
[filter:slo]
use = egg:swift#slo
[filter:dlo]
use = egg:swift#dlo
EOF
}

build_swift_rings() {
    local etc=$S3_DIR/etc kind port
    for kind in account container object; do
        [ -f "$etc/$kind.ring.gz" ] && continue
        case $kind in
            account) port=$SWIFT_ACCOUNT_PORT ;;
            container) port=$SWIFT_CONTAINER_PORT ;;
            object) port=$SWIFT_OBJECT_PORT ;;
        esac
        rm -f "$etc/$kind.builder"
        {
            swift-ring-builder "$etc/$kind.builder" create 6 1 1
            swift-ring-builder "$etc/$kind.builder" add "r1z1-$HOST:$port/d1" 1
            swift-ring-builder "$etc/$kind.builder" rebalance
        } >"$S3_DIR/log/ring-$kind.log" 2>&1 || {
            # rebalance exits 1 on warnings; the ring file is what counts
            [ -f "$etc/$kind.ring.gz" ] || { cat "$S3_DIR/log/ring-$kind.log" >&2; die "building the $kind ring failed"; }
        }
    done
}

s3_running() {
    local name
    pid_alive "$S3_DIR/run/memcached.pid" || return 1
    for name in "${SWIFT_SERVERS[@]}"; do pid_alive "$S3_DIR/run/$name.pid" || return 1; done
    curl -sf --max-time 10 "http://$HOST:$S3_PORT/healthcheck" >/dev/null
}

# Swift's own API (tempauth token) creates the bucket: an s3api bucket is a Swift container.
create_bucket() {
    local headers token url
    headers=$(curl -sf --max-time 10 -D - -o /dev/null -H "X-Auth-User: $S3_ACCOUNT:$S3_USER" -H "X-Auth-Key: $S3_SECRET" \
        "http://$HOST:$S3_PORT/auth/v1.0") || return 1
    token=$(printf '%s' "$headers" | tr -d '\r' | awk -F': ' 'tolower($1)=="x-auth-token"{print $2}')
    url=$(printf '%s' "$headers" | tr -d '\r' | awk -F': ' 'tolower($1)=="x-storage-url"{print $2}')
    [ -n "$token" ] && [ -n "$url" ] || return 1
    curl -sf --max-time 10 -X PUT -H "X-Auth-Token: $token" "$url/$S3_BUCKET" -o /dev/null
}

start_s3() {
    if s3_running; then say "s3 already running on http://$HOST:$S3_PORT"; return 0; fi
    stop_s3 quiet
    ensure_swift_installed
    local port
    for port in "$S3_PORT" "$SWIFT_OBJECT_PORT" "$SWIFT_CONTAINER_PORT" "$SWIFT_ACCOUNT_PORT" "$MEMCACHED_PORT"; do
        port_free "$port" || die "port $HOST:$port is already in use by another process (override with YOLOQ_*_PORT)"
    done
    write_swift_configs
    build_swift_rings
    local mc_user=()
    [ "$(id -u)" -eq 0 ] && mc_user=(-u root)
    launch memcached memcached -l "$HOST" -p "$MEMCACHED_PORT" -U 0 -m 64 "${mc_user[@]}"
    local name
    for name in "${SWIFT_SERVERS[@]}"; do
        launch "$name" "swift-$name-server" "$S3_DIR/etc/$name-server.conf"
    done
    wait_for "swift proxy" "$S3_DIR/log/proxy.log" curl -sf --max-time 10 "http://$HOST:$S3_PORT/healthcheck" \
        || { stop_s3 quiet; die "swift did not start (logs in $S3_DIR/log)"; }
    for name in "${SWIFT_SERVERS[@]}"; do
        pid_alive "$S3_DIR/run/$name.pid" || { tail -n 20 "$S3_DIR/log/$name.log" >&2; stop_s3 quiet; die "swift $name server exited (log: $S3_DIR/log/$name.log)"; }
    done
    wait_for "bucket $S3_BUCKET" "$S3_DIR/log/object.log" create_bucket \
        || { stop_s3 quiet; die "could not create bucket $S3_BUCKET (logs in $S3_DIR/log)"; }
    say "s3 ready: http://$HOST:$S3_PORT bucket $S3_BUCKET"
}

stop_s3() {
    local name pidfiles=()
    for name in proxy object container account memcached; do pidfiles+=("$S3_DIR/run/$name.pid"); done
    stop_pidfiles "${pidfiles[@]}"
    [ "${1:-}" = quiet ] || say "s3 stopped"
}

# ---------------------------------------------------------------- PostgreSQL

# initdb refuses root: as root, run the cluster as the postgres user in a folder it owns.
as_pg() {
    if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

pg_ctl_() { as_pg "$PG_BIN/pg_ctl" -D "$PG_DIR/data" "$@"; }
pg_sql() { as_pg "$PG_BIN/psql" -h "$PG_DIR/run" -p "$PG_PORT" -U postgres -d postgres -v ON_ERROR_STOP=1 -qtA "$@"; }

ensure_postgres_installed() {
    [ -x "$PG_BIN/initdb" ] || apt_install postgresql-15
    [ -x "$PG_BIN/initdb" ] || die "PostgreSQL 15 not found under $PG_BIN (set YOLOQ_PG_BIN)"
    if [ "$(id -u)" -eq 0 ]; then id postgres >/dev/null 2>&1 || die "running as root but there is no postgres user"; fi
}

init_postgres() {
    mkdir -p "$PG_DIR/run"
    if [ "$(id -u)" -eq 0 ]; then
        chown postgres: "$PG_DIR" "$PG_DIR/run"
        as_pg test -w "$PG_DIR" -a -x "$PG_DIR" \
            || die "the postgres user cannot use $PG_DIR: every folder above it must be traversable (chmod o+x)"
    fi
    [ -f "$PG_DIR/data/PG_VERSION" ] && return 0
    local pwfile=$PG_DIR/.pwfile
    printf '%s\n' "$PG_PASSWORD" >"$pwfile"
    chmod 600 "$pwfile"
    [ "$(id -u)" -eq 0 ] && chown postgres: "$pwfile"
    as_pg "$PG_BIN/initdb" -D "$PG_DIR/data" -U postgres --pwfile="$pwfile" -E UTF8 --locale=C.UTF-8 \
        --auth-local=trust --auth-host=scram-sha-256 >"$PG_DIR/initdb.log" 2>&1 \
        || { rm -f "$pwfile"; cat "$PG_DIR/initdb.log" >&2; die "initdb failed"; }
    rm -f "$pwfile"
}

ensure_database() {
    if [ "$(pg_sql -c "SELECT 1 FROM pg_roles WHERE rolname = '$PG_USER'")" != 1 ]; then
        pg_sql -c "CREATE ROLE \"$PG_USER\" LOGIN PASSWORD '$PG_PASSWORD'"
    fi
    # the tests give each multi-node pool a database of its own
    pg_sql -c "ALTER ROLE \"$PG_USER\" CREATEDB"
    if [ "$(pg_sql -c "SELECT 1 FROM pg_database WHERE datname = '$PG_DB'")" != 1 ]; then
        pg_sql -c "CREATE DATABASE \"$PG_DB\" OWNER \"$PG_USER\""
    fi
}

postgres_running() { [ -f "$PG_DIR/data/PG_VERSION" ] && pg_ctl_ status >/dev/null 2>&1; }

start_postgres() {
    ensure_postgres_installed
    if postgres_running; then
        say "postgres already running on $HOST:$PG_PORT"
    else
        port_free "$PG_PORT" || die "port $HOST:$PG_PORT is already in use by another process (set YOLOQ_PG_PORT)"
        init_postgres
        pg_ctl_ -l "$PG_DIR/postgres.log" -w -t "$READY_TIMEOUT" \
            -o "-c listen_addresses=$HOST -p $PG_PORT -c unix_socket_directories=$PG_DIR/run" start >/dev/null \
            || { tail -n 20 "$PG_DIR/postgres.log" >&2; die "postgres did not start (log: $PG_DIR/postgres.log)"; }
    fi
    ensure_database
    say "postgres ready: $HOST:$PG_PORT database $PG_DB"
}

stop_postgres() {
    if [ -f "$PG_DIR/data/PG_VERSION" ] && pg_ctl_ status >/dev/null 2>&1; then
        pg_ctl_ -m fast -w -t "$READY_TIMEOUT" stop >/dev/null || die "postgres did not stop"
    fi
    say "postgres stopped"
}

# ---------------------------------------------------------------- commands

# The Prefect API's own credentials (user:password): YOLOQ_PREFECT_AUTH, else one generated
# once and kept (mode 0600) beside the services' data. The server requires them; the stack's
# processes and node agents send them; users never need them (they hold yoloq API tokens).
prefect_auth() {
    if [ -n "${YOLOQ_PREFECT_AUTH:-}" ]; then echo "$YOLOQ_PREFECT_AUTH"; return; fi
    local file=$SERVICES_DIR/prefect-auth
    if [ ! -s "$file" ]; then
        mkdir -p "$SERVICES_DIR"
        (umask 077; echo "admin:$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')" > "$file.tmp")
        mv "$file.tmp" "$file"
    fi
    cat "$file"
}

print_env() {
    local auth
    auth=$(prefect_auth)
    cat <<EOF
export YOLOQ_SERVICES_DIR='$SERVICES_DIR'
export YOLOQ_S3_ENDPOINT_URL='http://$HOST:$S3_PORT'
export YOLOQ_S3_BUCKET='$S3_BUCKET'
export YOLOQ_CHECKPOINT_URI='s3://$S3_BUCKET/yoloq/checkpoints'
export AWS_ENDPOINT_URL='http://$HOST:$S3_PORT'
export MLFLOW_S3_ENDPOINT_URL='http://$HOST:$S3_PORT'
export AWS_ACCESS_KEY_ID='$S3_ACCOUNT:$S3_USER'
export AWS_SECRET_ACCESS_KEY='$S3_SECRET'
export AWS_DEFAULT_REGION='us-east-1'
export PREFECT_API_DATABASE_CONNECTION_URL='postgresql+asyncpg://$PG_USER:$PG_PASSWORD@$HOST:$PG_PORT/$PG_DB'
export PREFECT_SERVER_API_AUTH_STRING='$auth'
export PREFECT_API_AUTH_STRING='$auth'
EOF
}

print_status() {
    if s3_running; then echo "s3: running http://$HOST:$S3_PORT"; else echo "s3: stopped"; fi
    if postgres_running; then echo "postgres: running $HOST:$PG_PORT"; else echo "postgres: stopped"; fi
}

usage() { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

main() {
    local action=${1:-} target=${2:-all}
    case "$action" in
        env) print_env; return ;;
        status) print_status; return ;;
        start|stop) ;;
        *) usage ;;
    esac
    case "$target" in
        s3|postgres|all) ;;
        *) usage ;;
    esac
    mkdir -p "$SERVICES_DIR"
    if [ "$target" = s3 ] || [ "$target" = all ]; then "${action}_s3"; fi
    if [ "$target" = postgres ] || [ "$target" = all ]; then "${action}_postgres"; fi
}

main "$@"
