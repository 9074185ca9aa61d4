//! The workspace's MCP test server over stdio, for mcp-bridge's tests and benchmarks: it
//! behaves well or badly on request (startup modes and tools: `testkit::run_mcp_stdio_server`).
//! Written once, in testkit, which also serves it over HTTP (`testkit::McpHttpServer`). An
//! example, so that the published crate does not depend on the test kit: `cargo test` builds
//! it beside the test binaries (`cargo build --example misbehaving-mcp-server` for one test).

fn main() {
    testkit::run_mcp_stdio_server();
}
