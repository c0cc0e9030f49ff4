// ethers v6 WebSocketProvider against the gateway.
// usage: node ethers_ws.mjs ws://host:port/bsc KEY path|header
// Prints one JSON line when ready, one per new block (3), then {"done":true}.
import { WebSocketProvider } from "ethers";

const [base, key, where] = process.argv.slice(2);
let provider;
if (where === "header") {
  // Node's built-in WebSocket cannot set headers; ethers accepts a factory.
  const { WebSocket } = await import("ws");
  provider = new WebSocketProvider(
    () => new WebSocket(base, { headers: { Authorization: `Bearer ${key}` } }),
  );
} else {
  provider = new WebSocketProvider(`${base}/${key}`);
}
const network = await provider.getNetwork();
const blockNumber = await provider.getBlockNumber();
console.log(JSON.stringify({ chainId: Number(network.chainId), blockNumber }));
let seen = 0;
await new Promise((resolve) => {
  provider.on("block", (block) => {
    console.log(JSON.stringify({ block }));
    seen += 1;
    if (seen === 3) resolve();
  });
});
await provider.removeAllListeners();
console.log(JSON.stringify({ done: true }));
await provider.destroy();
process.exit(0);
