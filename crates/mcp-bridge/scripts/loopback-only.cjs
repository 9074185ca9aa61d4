// Preload (`node --require loopback-only.cjs server.js`): every TCP `listen` of the process binds
// 127.0.0.1, whatever host (or none, which means every interface) the server asked for. Used to
// run servers that listen on all interfaces (server-everything's streamableHttp mode calls
// `app.listen(PORT)`, the MCP conformance suite's scenario servers `listen(0)`) in tests and
// demos without exposing them to the network.
//
// A listen without a host binds at once, and servers rely on that: the conformance suite reads
// `server.address().port` on the line after `listen(0)`. With a host, Node looks the host up
// first (`dns.lookup`, asynchronous even for an address) and binds later; so for the length of
// the rewritten call the lookup of 127.0.0.1 answers at once, and the bind happens inside it
// as before.
"use strict";
const net = require("net");
const dns = require("dns");
const listen = net.Server.prototype.listen;

function onLoopback(server, args) {
  const lookup = dns.lookup;
  dns.lookup = function (host, ...rest) {
    const callback = rest[rest.length - 1];
    if (host === "127.0.0.1" && typeof callback === "function" && rest.length === 1) {
      return callback(null, "127.0.0.1", 4);
    }
    return lookup.call(this, host, ...rest);
  };
  try {
    return listen.apply(server, args);
  } finally {
    dns.lookup = lookup;
  }
}

net.Server.prototype.listen = function (...args) {
  const first = args[0];
  if (first === undefined || typeof first === "function") {
    // listen() / listen(callback): a random port on every interface — on loopback instead.
    return onLoopback(this, [{ port: 0, host: "127.0.0.1" }, ...args.filter((a) => typeof a === "function")]);
  }
  if (first !== null && typeof first === "object" && !Array.isArray(first)) {
    if (first.path === undefined && first.fd === undefined && first.handle === undefined && !("_handle" in first)) {
      args[0] = { ...first, host: "127.0.0.1" };
      return onLoopback(this, args);
    }
    return listen.apply(this, args);
  }
  if (typeof first === "number" || (typeof first === "string" && /^\d+$/.test(first))) {
    const callback = args.find((a) => typeof a === "function");
    const backlog = typeof args[2] === "number" ? args[2] : undefined;
    const options = { port: Number(first), host: "127.0.0.1" };
    if (backlog !== undefined) options.backlog = backlog;
    return onLoopback(this, callback ? [options, callback] : [options]);
  }
  return listen.apply(this, args);
};
