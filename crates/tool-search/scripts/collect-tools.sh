#!/usr/bin/env bash
# Collects the real `tools/list` output of pinned MCP servers from npm and PyPI into
# crates/tool-search/fixtures/tools.json, the tool-search evaluation's fixture.
#
# Usage: bash crates/tool-search/scripts/collect-tools.sh [PREFIX]
#   PREFIX (default $HOME/.cache/llm-toolkit/tool-search-servers) holds the installs. Needs node,
#   npm, python3 (with venv) and the npm and PyPI registries. Each server only starts and lists
#   its tools, with dummy credentials where one is required to start; a server may still try to
#   reach its own service (or send telemetry) while starting: nothing the fixture depends on.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
PREFIX="${1:-${HOME}/.cache/llm-toolkit/tool-search-servers}"
mkdir -p "${PREFIX}"

NPM_PACKAGES=(
  "@modelcontextprotocol/server-everything@2026.8.31"
  "@modelcontextprotocol/server-filesystem@2026.8.31"
  "@modelcontextprotocol/server-memory@2026.8.31"
  "@modelcontextprotocol/server-sequential-thinking@2026.8.31"
  "@modelcontextprotocol/server-github@2025.4.8"
  "@modelcontextprotocol/server-gitlab@2025.4.25"
  "@modelcontextprotocol/server-slack@2025.4.25"
  "@modelcontextprotocol/server-google-maps@0.6.2"
  "@modelcontextprotocol/server-brave-search@0.6.2"
  "@modelcontextprotocol/server-puppeteer@2025.5.12"
  "@playwright/mcp@0.0.83"
  "chrome-devtools-mcp@1.11.0"
  "@notionhq/notion-mcp-server@2.5.2"
  "mcp-server-kubernetes@4.1.7"
  "tavily-mcp@0.2.22"
  "exa-mcp-server@3.4.1"
  "firecrawl-mcp@3.26.0"
  "@upstash/context7-mcp@4.1.1"
  "@sentry/mcp-server@0.39.0"
  "@browserbasehq/mcp-server-browserbase@2.4.3"
  "@modelcontextprotocol/server-aws-kb-retrieval@0.6.2"
  "@modelcontextprotocol/server-everart@0.6.2"
  "@wonderwhy-er/desktop-commander@0.2.52"
  "@executeautomation/playwright-mcp-server@1.0.12"
  "@cyanheads/git-mcp-server@2.15.3"
)
PYPI_PACKAGES=("mcp-server-git==2026.10.19" "mcp-server-time==2026.10.19" "mcp-server-fetch==2026.10.24")

# No browser downloads at install time: the servers only list their tools here.
# Servers that honour it send no telemetry.
export DO_NOT_TRACK=1
export PUPPETEER_SKIP_DOWNLOAD=1 PUPPETEER_SKIP_CHROMIUM_DOWNLOAD=1 PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1
npm install --prefix "${PREFIX}/npm" --no-audit --no-fund --loglevel=error "${NPM_PACKAGES[@]}" >&2
if [[ ! -x "${PREFIX}/venv/bin/python" ]]; then python3 -m venv "${PREFIX}/venv"; fi
"${PREFIX}/venv/bin/pip" install --quiet "${PYPI_PACKAGES[@]}" >&2

python3 "${HERE}/collect_tools.py" "${PREFIX}" "${HERE}/../fixtures/tools.json"
