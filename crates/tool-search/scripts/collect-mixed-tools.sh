#!/usr/bin/env bash
# Collects the real `tools/list` output of pinned MCP servers from Chinese vendors (maps,
# payments, office suite, search, weather, finance, recipes, DevOps) into
# crates/tool-search/fixtures/mixed-tools.json: the mixed-language half of the evaluation's
# catalog (the other half is tools.json, collect-tools.sh).
#
# Usage: bash crates/tool-search/scripts/collect-mixed-tools.sh [PREFIX]
#   PREFIX (default $HOME/.cache/llm-toolkit/tool-search-mixed) holds the installs. Needs node,
#   npm, python3 (3.11, with venv), openssl and the npm and PyPI registries. Each server only
#   starts and lists its tools, with dummy credentials where one is required to start.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
PREFIX="${1:-${HOME}/.cache/llm-toolkit/tool-search-mixed}"
mkdir -p "${PREFIX}"

NPM_PACKAGES=(
  "@amap/amap-maps-mcp-server@0.0.8"
  "@baidumap/mcp-server-baidu-map@1.0.5"
  "howtocook-mcp@0.2.2"
  "@larksuiteoapi/lark-mcp@0.5.1"
  "alibabacloud-devops-mcp-server@0.3.64"
)
PYPI_PACKAGES=(
  "baidu-ai-search-mcp==0.1.0"
  "hefeng-weather-mcp==0.3.0"
  "a-stock-mcp-server==1.1.1"
  "ant-intl-alipayplus-mcp==1.0.1"
)

export DO_NOT_TRACK=1
# --ignore-scripts: lark-mcp's optional keychain module (keytar) needs a native build that
# listing tools never uses.
npm install --ignore-scripts --prefix "${PREFIX}/npm" --no-audit --no-fund --loglevel=error \
  "${NPM_PACKAGES[@]}" >&2
if [[ ! -x "${PREFIX}/venv/bin/python" ]]; then python3 -m venv "${PREFIX}/venv"; fi
for p in "${PYPI_PACKAGES[@]}"; do "${PREFIX}/venv/bin/pip" install --quiet "$p" >&2; done

python3 "${HERE}/collect_tools.py" "${PREFIX}" "${HERE}/../fixtures/mixed-tools.json" mixed
