//! The workspace's MCP test server over stdio, for mcp-bridge's tests and benchmarks: it
//! behaves well or badly on request (startup modes and tools: `testkit::run_mcp_stdio_server`).
//! Written once, in testkit, which also serves it over HTTP (`testkit::McpHttpServer`); built
//! only with the `test-server` feature, which mcp-bridge's own tests and benches turn on.

fn main() {
    testkit::run_mcp_stdio_server();
}
