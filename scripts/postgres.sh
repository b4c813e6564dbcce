# A throwaway PostgreSQL server for the tests, sourced by scripts/test.sh (and usable on
# its own: `source scripts/postgres.sh && start_test_postgres`).
#
# start_test_postgres installs Debian's `postgresql` package when no server binaries are
# found, runs `initdb` into a temp dir as an unprivileged user (PostgreSQL refuses to run
# as root), starts the server on a free port of 127.0.0.1 with trust auth and its socket
# in the same temp dir, stops it and removes the dir on exit, and exports
# BOSUN_TEST_DATABASE_URL (the `postgres` database of role `bosun`, a superuser the tests
# create a fresh database per case with).

# The newest server bin dir: pg_config's, else /usr/lib/postgresql/*/bin.
pg_bindir() {
  local dir
  if command -v pg_config >/dev/null 2>&1; then
    dir=$(pg_config --bindir 2>/dev/null)
    if [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ]; then
      echo "$dir"
      return 0
    fi
  fi
  dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  if [ -n "$dir" ] && [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ]; then
    echo "$dir"
    return 0
  fi
  return 1
}

start_test_postgres() {
  local bindir
  if ! bindir=$(pg_bindir); then
    printf '==> %s\n' "installing postgresql"
    local sudo=
    [ "$(id -u)" -ne 0 ] && sudo=sudo
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq postgresql >/dev/null
    bindir=$(pg_bindir) || {
      echo "no PostgreSQL server binaries after installing postgresql" >&2
      return 1
    }
  fi

  # Who runs the server: ourselves, or `nobody` when we are root.
  local as=()
  if [ "$(id -u)" -eq 0 ]; then
    as=(runuser -u nobody --)
  fi

  BOSUN_PG_DIR=$(mktemp -d /tmp/bosun-pg.XXXXXX)
  chmod 755 "$BOSUN_PG_DIR"
  [ "$(id -u)" -eq 0 ] && chown nobody "$BOSUN_PG_DIR"
  "${as[@]}" "$bindir/initdb" -D "$BOSUN_PG_DIR/data" -U bosun --auth=trust \
    --encoding=UTF8 --locale=C >"$BOSUN_PG_DIR/initdb.log" 2>&1 || {
    cat "$BOSUN_PG_DIR/initdb.log" >&2
    return 1
  }

  # A free port: ask the kernel for one, then hand it to the server.
  local port
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  BOSUN_PG_BINDIR=$bindir
  "${as[@]}" "$bindir/pg_ctl" -D "$BOSUN_PG_DIR/data" -l "$BOSUN_PG_DIR/server.log" -w -t 60 \
    -o "-h 127.0.0.1 -p $port -k $BOSUN_PG_DIR -c max_connections=400 -c fsync=off -c synchronous_commit=off -c full_page_writes=off" \
    start >/dev/null || {
    cat "$BOSUN_PG_DIR/server.log" >&2
    return 1
  }
  trap stop_test_postgres EXIT
  export BOSUN_TEST_DATABASE_URL="postgres://bosun@127.0.0.1:$port/postgres"
  printf '==> %s\n' "PostgreSQL $("$bindir/postgres" --version | awk '{print $3}') at $BOSUN_TEST_DATABASE_URL"
}

stop_test_postgres() {
  if [ -n "${BOSUN_PG_DIR:-}" ] && [ -d "$BOSUN_PG_DIR/data" ]; then
    local as=()
    [ "$(id -u)" -eq 0 ] && as=(runuser -u nobody --)
    "${as[@]}" "$BOSUN_PG_BINDIR/pg_ctl" -D "$BOSUN_PG_DIR/data" -m immediate -w stop \
      >/dev/null 2>&1 || true
    rm -rf "$BOSUN_PG_DIR"
  fi
}
