#!/usr/bin/env bash
# Installs the third-party MCP server the mcp-bridge tests run against:
# the official @modelcontextprotocol/server-everything, pinned, from npm.
#
# Usage: crates/mcp-bridge/install-test-deps.sh [PREFIX]
#   PREFIX defaults to ${XDG_CACHE_HOME:-$HOME/.cache}/llm-toolkit/npm. Idempotent: does nothing when the pinned
#   version is already there. Prints the path of the server's JS entry on its last line; the
#   tests read that path from MCP_SERVER_EVERYTHING, defaulting to
#   PREFIX/node_modules/@modelcontextprotocol/server-everything/dist/index.js.
# Needs node (>= 18) and npm on PATH and a reachable npm registry.
set -euo pipefail

VERSION="2026.8.31"
PKG="@modelcontextprotocol/server-everything"
PREFIX="${1:-${XDG_CACHE_HOME:-${HOME}/.cache}/llm-toolkit/npm}"
PKG_DIR="${PREFIX}/node_modules/${PKG}"
ENTRY="${PKG_DIR}/dist/index.js"

installed_version() {
  node -e 'try { process.stdout.write(require(process.argv[1]).version) } catch (e) {}' \
    "${PKG_DIR}/package.json" 2>/dev/null || true
}

if [[ "$(installed_version)" != "${VERSION}" || ! -f "${ENTRY}" ]]; then
  mkdir -p "${PREFIX}"
  npm install --prefix "${PREFIX}" --no-audit --no-fund --loglevel=error "${PKG}@${VERSION}" >&2
fi

if [[ "$(installed_version)" != "${VERSION}" || ! -f "${ENTRY}" ]]; then
  echo "install-test-deps: ${PKG}@${VERSION} is not at ${ENTRY} after npm install" >&2
  exit 1
fi
echo "${ENTRY}"
