#!/usr/bin/env bash
# Installs the servers the tests start (redis-server, redis-sentinel,
# memcached, PostgreSQL), node/npm for the OData client test, and the image
# builder the deploy test runs (buildah, unless podman is there; ~25 s) when
# any is missing. Debian/Ubuntu, as root or with sudo.
set -euo pipefail

have_postgres() {
	command -v postgres >/dev/null 2>&1 && return 0
	ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1
}

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-sentinel >/dev/null 2>&1 || missing+=(redis-sentinel)
command -v memcached >/dev/null 2>&1 || missing+=(memcached)
have_postgres || missing+=(postgresql)
# node and npm run the generic OData client test (make test-npm installs it).
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
command -v buildah >/dev/null 2>&1 || command -v podman >/dev/null 2>&1 || missing+=(buildah)

if [ ${#missing[@]} -eq 0 ]; then
	exit 0
fi
echo "test-deps: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
	command -v sudo >/dev/null 2>&1 || { echo "test-deps: need root (or sudo) to install ${missing[*]}" >&2; exit 1; }
	sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq "${missing[@]}" >/dev/null
# Debian starts the packaged services; the tests start their own on free ports.
for svc in redis-server redis-sentinel memcached postgresql; do
	(command -v service >/dev/null 2>&1 && $sudo service "$svc" stop >/dev/null 2>&1) || true
done
