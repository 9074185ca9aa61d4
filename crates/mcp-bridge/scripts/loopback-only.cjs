// Preload (`node --require loopback-only.cjs server.js`): every TCP `listen` of the process binds
// 127.0.0.1, whatever host (or none, which means every interface) the server asked for. Used to
// run servers that listen on all interfaces (server-everything's streamableHttp mode calls
// `app.listen(PORT)`) in tests and demos without exposing them to the network.
"use strict";
const net = require("net");
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  const first = args[0];
  if (first === undefined || typeof first === "function") {
    // listen() / listen(callback): a random port on every interface — on loopback instead.
    return listen.call(this, { port: 0, host: "127.0.0.1" }, ...args.filter((a) => typeof a === "function"));
  }
  if (first !== null && typeof first === "object" && !Array.isArray(first)) {
    if (first.path === undefined && first.fd === undefined && first.handle === undefined) {
      args[0] = { ...first, host: "127.0.0.1" };
    }
    return listen.apply(this, args);
  }
  if (typeof first === "number" || (typeof first === "string" && /^\d+$/.test(first))) {
    const callback = args.find((a) => typeof a === "function");
    const backlog = typeof args[2] === "number" ? args[2] : undefined;
    const options = { port: Number(first), host: "127.0.0.1" };
    if (backlog !== undefined) options.backlog = backlog;
    return callback ? listen.call(this, options, callback) : listen.call(this, options);
  }
  return listen.apply(this, args);
};
