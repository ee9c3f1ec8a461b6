// Loaded with `node --import` before server-everything's HTTP mode, which listens on every
// interface: a listen on a bare port number is made on 127.0.0.1 instead, so tests never open
// a port to the network.
import net from "node:net";

const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  const port = args[0];
  const bare = typeof port === "number" || (typeof port === "string" && /^\d+$/.test(port));
  if (bare && typeof args[1] !== "string") {
    const done = args.find((a) => typeof a === "function");
    return listen.call(this, { port: Number(port), host: "127.0.0.1" }, done);
  }
  return listen.apply(this, args);
};
