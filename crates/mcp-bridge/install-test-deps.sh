#!/usr/bin/env bash
# Installs the third-party MCP servers the mcp-bridge tests run against:
# the official @modelcontextprotocol/server-everything and howtocook-mcp (tools described in
# Chinese), pinned, from npm, and the official
# MCP Python SDK (`mcp` and its dependencies, pinned in tests/python/requirements.txt) in a
# virtualenv at ${XDG_CACHE_HOME:-$HOME/.cache}/llm-toolkit/mcp-python, from PyPI.
#
# Usage: crates/mcp-bridge/install-test-deps.sh [PREFIX]
#   PREFIX defaults to ${XDG_CACHE_HOME:-$HOME/.cache}/llm-toolkit/npm. Idempotent: does nothing when the pinned
#   version is already there. Prints the path of the server's JS entry on its last line; the
#   tests read that path from MCP_SERVER_EVERYTHING, defaulting to
#   PREFIX/node_modules/@modelcontextprotocol/server-everything/dist/index.js.
# Needs node (>= 18) and npm on PATH, python3 with venv and pip, and reachable npm and PyPI
# registries.
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

# A server whose tools are described in Chinese (HowToCook's recipes, offline): the Stage 4
# demo searches a mixed-language catalog with it. Pinned like server-everything.
COOK_VERSION="0.2.2"
COOK_PKG="howtocook-mcp"
COOK_DIR="${PREFIX}/node_modules/${COOK_PKG}"
cook_version() {
  node -e 'try { process.stdout.write(require(process.argv[1]).version) } catch (e) {}' \
    "${COOK_DIR}/package.json" 2>/dev/null || true
}
if [[ "$(cook_version)" != "${COOK_VERSION}" || ! -f "${COOK_DIR}/build/index.js" ]]; then
  npm install --prefix "${PREFIX}" --no-audit --no-fund --loglevel=error "${COOK_PKG}@${COOK_VERSION}" >&2
fi
if [[ "$(cook_version)" != "${COOK_VERSION}" || ! -f "${COOK_DIR}/build/index.js" ]]; then
  echo "install-test-deps: ${COOK_PKG}@${COOK_VERSION} is not at ${COOK_DIR} after npm install" >&2
  exit 1
fi

# The Python SDK's server (tests/session_expiry.rs): reinstalled when requirements.txt changes.
REQS="$(cd "$(dirname "$0")" && pwd)/tests/python/requirements.txt"
VENV="${XDG_CACHE_HOME:-${HOME}/.cache}/llm-toolkit/mcp-python"
STAMP="${VENV}/requirements.sha256"
WANT="$(sha256sum "${REQS}" | cut -d' ' -f1)"
if [[ ! -x "${VENV}/bin/python" || "$(cat "${STAMP}" 2>/dev/null)" != "${WANT}" ]]; then
  rm -rf "${VENV}"
  "${PYTHON:-python3}" -m venv "${VENV}" >&2
  "${VENV}/bin/pip" install -q --disable-pip-version-check -r "${REQS}" >&2
  echo "${WANT}" > "${STAMP}"
fi
if ! "${VENV}/bin/python" -c 'import mcp.server.mcpserver' 2>/dev/null; then
  echo "install-test-deps: the MCP Python SDK does not import from ${VENV} after pip install" >&2
  exit 1
fi

echo "${ENTRY}"
