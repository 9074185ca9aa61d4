#!/usr/bin/env bash
# Installs the MCP Inspector (npm @modelcontextprotocol/inspector), pinned, whose CLI mode drives
# the server in tests/inspector_cli.rs, into ${XDG_CACHE_HOME:-$HOME/.cache}/llm-toolkit/npm-inspector.
#
# Usage: crates/mcp-server/install-test-deps.sh [PREFIX]
#   Idempotent: does nothing when the pinned version is already there. Prints the path of the
#   Inspector's launcher (the `mcp-inspector` bin) on its last line; the tests read it from
#   MCP_INSPECTOR, defaulting to PREFIX/node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js.
# Needs node and npm on PATH and a reachable npm registry. The package asks for Node >= 22.19;
# its CLI mode (all the tests use) runs on Debian's Node 20, so npm's engine warning is expected.
set -euo pipefail

VERSION="2.12.0"
PKG="@modelcontextprotocol/inspector"
PREFIX="${1:-${XDG_CACHE_HOME:-${HOME}/.cache}/llm-toolkit/npm-inspector}"
PKG_DIR="${PREFIX}/node_modules/${PKG}"
ENTRY="${PKG_DIR}/clients/launcher/build/index.js"

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
