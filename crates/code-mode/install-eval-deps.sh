#!/usr/bin/env bash
# Installs the npm MCP servers the code-mode evaluation runs against (beyond server-everything,
# which crates/mcp-bridge/install-test-deps.sh installs): the official
# @modelcontextprotocol/server-filesystem and server-memory, pinned, in their own prefix.
#
# Usage: crates/code-mode/install-eval-deps.sh [PREFIX]
#   PREFIX defaults to ${XDG_CACHE_HOME:-$HOME/.cache}/llm-toolkit/npm-code-mode-eval, where the evaluation looks
#   (or set MCP_SERVER_FILESYSTEM / MCP_SERVER_MEMORY to each server's dist/index.js).
#   Idempotent. Needs node (>= 18) and npm on PATH and a reachable npm registry.
set -euo pipefail

VERSION="2026.8.31"
PREFIX="${1:-${XDG_CACHE_HOME:-${HOME}/.cache}/llm-toolkit/npm-code-mode-eval}"
for pkg in server-filesystem server-memory; do
  entry="${PREFIX}/node_modules/@modelcontextprotocol/${pkg}/dist/index.js"
  have=$(node -e 'try { process.stdout.write(require(process.argv[1]).version) } catch (e) {}' \
    "${PREFIX}/node_modules/@modelcontextprotocol/${pkg}/package.json" 2>/dev/null || true)
  if [[ "${have}" != "${VERSION}" || ! -f "${entry}" ]]; then
    mkdir -p "${PREFIX}"
    npm install --prefix "${PREFIX}" --no-audit --no-fund --loglevel=error "@modelcontextprotocol/${pkg}@${VERSION}" >&2
  fi
  [[ -f "${entry}" ]] || { echo "install-eval-deps: ${pkg} is not at ${entry}" >&2; exit 1; }
  echo "${entry}"
done
