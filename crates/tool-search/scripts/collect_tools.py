"""Starts each pinned MCP server over stdio, does the MCP handshake and `tools/list` (following
`nextCursor`), and writes the raw results to the fixture. Called by collect-tools.sh (the
360-tool catalog) and by collect-mixed-tools.sh (third argument `mixed`: Chinese vendors'
servers, whose tools are described in Chinese or in both languages)."""
import json
import os
import select
import subprocess
import sys
import tempfile
import time

PREFIX, OUT = sys.argv[1], sys.argv[2]
CATALOG = sys.argv[3] if len(sys.argv) > 3 else "main"
NPM = os.path.join(PREFIX, "npm", "node_modules")
VENV = os.path.join(PREFIX, "venv", "bin")
SCRATCH = tempfile.mkdtemp(prefix="tool-search-fs-")


def bin_of(package):
    """The JS entry of an npm package's first `bin`."""
    meta = json.load(open(os.path.join(NPM, package, "package.json")))
    b = meta.get("bin")
    path = b if isinstance(b, str) else next(iter(b.values()))
    return os.path.join(NPM, package, path), meta["version"]


def npm(name, package, *args, env=None):
    entry, version = bin_of(package)
    return name, f"npm:{package}@{version}", ["node", entry, *args], env or {}


def pypi_version(package):
    return subprocess.run([os.path.join(VENV, "pip"), "show", package], capture_output=True,
                          text=True).stdout.split("Version: ")[1].split()[0]


def pypi(name, module, package):
    version = pypi_version(package)
    return name, f"pypi:{package}=={version}", [os.path.join(VENV, "python"), "-m", module], {}


def pypi_script(name, package, script=None, *args, env=None):
    """A PyPI server started by its console script (`script`, default the package's name)."""
    version = pypi_version(package)
    cmd = [os.path.join(VENV, script or package), *args]
    return name, f"pypi:{package}=={version}", cmd, env or {}


def main_servers():
    return [
    npm("everything", "@modelcontextprotocol/server-everything", "stdio"),
    npm("filesystem", "@modelcontextprotocol/server-filesystem", SCRATCH),
    npm("memory", "@modelcontextprotocol/server-memory",
        env={"MEMORY_FILE_PATH": os.path.join(SCRATCH, "memory.json")}),
    npm("sequential_thinking", "@modelcontextprotocol/server-sequential-thinking"),
    npm("github", "@modelcontextprotocol/server-github",
        env={"GITHUB_PERSONAL_ACCESS_TOKEN": "dummy"}),
    npm("gitlab", "@modelcontextprotocol/server-gitlab",
        env={"GITLAB_PERSONAL_ACCESS_TOKEN": "dummy", "GITLAB_API_URL": "http://127.0.0.1:9/api/v4"}),
    npm("slack", "@modelcontextprotocol/server-slack",
        env={"SLACK_BOT_TOKEN": "xoxb-dummy", "SLACK_TEAM_ID": "T0"}),
    npm("google_maps", "@modelcontextprotocol/server-google-maps",
        env={"GOOGLE_MAPS_API_KEY": "dummy"}),
    npm("brave_search", "@modelcontextprotocol/server-brave-search",
        env={"BRAVE_API_KEY": "dummy"}),
    npm("puppeteer", "@modelcontextprotocol/server-puppeteer"),
    npm("playwright", "@playwright/mcp"),
    npm("chrome_devtools", "chrome-devtools-mcp", "--no-usage-statistics"),
    npm("notion", "@notionhq/notion-mcp-server", env={"NOTION_TOKEN": "dummy"}),
    npm("kubernetes", "mcp-server-kubernetes"),
    npm("tavily", "tavily-mcp", env={"TAVILY_API_KEY": "dummy"}),
    npm("exa", "exa-mcp-server", env={"EXA_API_KEY": "dummy"}),
    npm("firecrawl", "firecrawl-mcp", env={"FIRECRAWL_API_KEY": "fc-dummy"}),
    npm("context7", "@upstash/context7-mcp"),
    npm("sentry", "@sentry/mcp-server", "--access-token=dummy"),
    npm("browserbase", "@browserbasehq/mcp-server-browserbase",
        env={"BROWSERBASE_API_KEY": "dummy", "BROWSERBASE_PROJECT_ID": "dummy"}),
    npm("aws_kb", "@modelcontextprotocol/server-aws-kb-retrieval",
        env={"AWS_ACCESS_KEY_ID": "dummy", "AWS_SECRET_ACCESS_KEY": "dummy", "AWS_REGION": "us-east-1"}),
    npm("everart", "@modelcontextprotocol/server-everart", env={"EVERART_API_KEY": "dummy"}),
    npm("desktop_commander", "@wonderwhy-er/desktop-commander"),
    npm("playwright_ea", "@executeautomation/playwright-mcp-server"),
    npm("git_cyanheads", "@cyanheads/git-mcp-server"),
    pypi("git", "mcp_server_git", "mcp-server-git"),
    pypi("time", "mcp_server_time", "mcp-server-time"),
    pypi("fetch", "mcp_server_fetch", "mcp-server-fetch"),
]


def mixed_servers():
    """Chinese vendors' servers (maps, payments, office suites, search, finance, weather,
    recipes, DevOps): most describe their tools in Chinese, some in English, some in both."""
    return [
        npm("amap", "@amap/amap-maps-mcp-server", env={"AMAP_MAPS_API_KEY": "dummy"}),
        npm("baidu_map", "@baidumap/mcp-server-baidu-map", env={"BAIDU_MAP_API_KEY": "dummy"}),
        npm("howtocook", "howtocook-mcp"),
        npm("lark", "@larksuiteoapi/lark-mcp", "mcp", "-a", "cli_dummy", "-s", "dummy"),
        npm("yunxiao", "alibabacloud-devops-mcp-server",
            env={"ALIBABA_CLOUD_DEVOPS_TOKEN": "dummy"}),
        pypi_script("baidu_search", "baidu-ai-search-mcp", env={"BAIDU_API_KEY": "dummy"}),
        pypi_script("qweather", "hefeng-weather-mcp", None, "stdio", env={
            "HEFENG_API_HOST": "127.0.0.1:9", "HEFENG_PROJECT_ID": "dummy",
            "HEFENG_KEY_ID": "dummy", "HEFENG_PRIVATE_KEY_PATH": throwaway_ed25519_key()}),
        pypi("a_stock", "a_stock_mcp_server.server", "a-stock-mcp-server"),
        pypi_script("alipayplus", "ant-intl-alipayplus-mcp", env={
            "CLIENT_ID": "dummy", "MERCHANT_PRIVATE_KEY": "dummy", "ALIPAY_PUBLIC_KEY": "dummy"}),
    ]


def throwaway_ed25519_key():
    """A fresh Ed25519 key in the scratch directory: the weather server signs a token with one
    when it starts (it never reaches its service here)."""
    path = os.path.join(SCRATCH, "ed25519.pem")
    subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", path], check=True)
    return path


SERVERS = mixed_servers() if CATALOG == "mixed" else main_servers()


def tools_of(cmd, env, limit=60):
    full_env = {"PATH": os.environ["PATH"], "HOME": SCRATCH, "DO_NOT_TRACK": "1", **env}
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, env=full_env, cwd=SCRATCH,
                         start_new_session=True)
    deadline = time.time() + limit
    buf = b""

    def send(m):
        p.stdin.write((json.dumps(m) + "\n").encode())
        p.stdin.flush()

    def receive(want):
        nonlocal buf
        while time.time() < deadline:
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                try:
                    m = json.loads(line)
                except ValueError:
                    continue
                if m.get("id") == want:
                    return m
            r, _, _ = select.select([p.stdout], [], [], 1)
            if r:
                chunk = os.read(p.stdout.fileno(), 65536)
                if not chunk:
                    raise RuntimeError("server exited")
                buf += chunk
        raise RuntimeError("timed out")

    try:
        send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "tool-search-fixture", "version": "1"}}})
        receive(0)
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        tools, cursor, n = [], None, 1
        while True:
            params = {"cursor": cursor} if cursor else {}
            send({"jsonrpc": "2.0", "id": n, "method": "tools/list", "params": params})
            result = receive(n)["result"]
            tools += result["tools"]
            cursor = result.get("nextCursor")
            n += 1
            if not cursor:
                return tools
    finally:
        try:
            os.killpg(p.pid, 9)
        except ProcessLookupError:
            pass


def main():
    out, failed = [], []
    for name, package, cmd, env in SERVERS:
        try:
            tools = tools_of(cmd, env)
            print(f"{name:20} {package:60} {len(tools):4} tools", file=sys.stderr)
            out.append({"name": name, "package": package, "tools": tools})
        except Exception as e:  # noqa: BLE001 - report every server, then fail
            print(f"{name:20} {package:60} FAILED: {e}", file=sys.stderr)
            failed.append(name)
    total = sum(len(s["tools"]) for s in out)
    print(f"{len(out)} servers, {total} tools", file=sys.stderr)
    if failed:
        sys.exit(f"failed: {failed}")
    with open(OUT, "w") as f:
        json.dump({"collected": time.strftime("%Y-%m-%d"), "servers": out}, f, indent=1,
                  ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
