#!/usr/bin/env bash
# Installs LiteLLM's proxy, pinned with every dependency (requirements.txt beside this file), in
# a virtualenv at ${XDG_CACHE_HOME:-$HOME/.cache}/llm-toolkit/litellm-proxy, from PyPI.
#
# Usage: crates/testkit/litellm/install.sh
#   Idempotent: does nothing when the virtualenv holds this requirements.txt's pins (its hash is
#   kept beside them). Prints the virtualenv's python on its last line. Run by `cargo xtask
#   stage 0` and `cargo xtask test`, and by testkit's LiteLlmProxy when the proxy is missing;
#   concurrent runs wait for each other (flock).
# Needs python3 with venv and pip, and a reachable PyPI.
set -euo pipefail

DIR="$(cd "$(dirname "$0")" && pwd)"
REQS="${DIR}/requirements.txt"
CACHE="${XDG_CACHE_HOME:-${HOME}/.cache}/llm-toolkit"
VENV="${CACHE}/litellm-proxy"
STAMP="${VENV}/requirements.sha256"
VERSION="$(sed -n 's/^litellm==//p' "${REQS}")"

mkdir -p "${CACHE}"
exec 9>"${CACHE}/litellm-proxy.lock"
flock 9

WANT="$(sha256sum "${REQS}" | cut -d' ' -f1)"
if [[ ! -x "${VENV}/bin/python" || "$(cat "${STAMP}" 2>/dev/null)" != "${WANT}" ]]; then
  rm -rf "${VENV}"
  "${PYTHON:-python3}" -m venv "${VENV}" >&2
  "${VENV}/bin/pip" install -q --disable-pip-version-check -r "${REQS}" >&2
  echo "${WANT}" > "${STAMP}"
fi

GOT="$("${VENV}/bin/python" -c 'import importlib.metadata as m; print(m.version("litellm"))' 2>/dev/null || true)"
if [[ "${GOT}" != "${VERSION}" ]]; then
  echo "litellm/install.sh: litellm ${VERSION} is not in ${VENV} after pip install (found: '${GOT}')" >&2
  rm -f "${STAMP}"
  exit 1
fi

echo "${VENV}/bin/python"
