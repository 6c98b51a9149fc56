#!/usr/bin/env bash
# What make deploy-test needs on a Debian host, installed when missing (as .ci/run does for Chromium):
# a Docker engine, Compose (v2 plugin or v1 docker-compose) and debootstrap.
set -euo pipefail
missing=()
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
if ! docker compose version >/dev/null 2>&1 && ! command -v docker-compose >/dev/null 2>&1; then
    missing+=(docker-compose)
fi
if ((${#missing[@]})); then
    echo "installing ${missing[*]}" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
