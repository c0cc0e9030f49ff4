// ethers v6 WebSocketProvider, a key over its notification budget: what the
// application sees when the gateway tells it that notifications were dropped.
// usage: node ethers_budget.mjs ws://host:port/bsc/KEY
// Prints {"ready":true} once subscribed to blocks; then for each "call" line
// on stdin one JSON line: the block number, or the error ethers raised.
import { WebSocketProvider } from "ethers";
import * as readline from "node:readline";

const provider = new WebSocketProvider(process.argv[2]);
let blocks = 0;
await provider.on("block", () => {
  blocks += 1;
});
await provider.getNetwork();
console.log(JSON.stringify({ ready: true }));
for await (const line of readline.createInterface({ input: process.stdin })) {
  if (line.trim() !== "call") break;
  try {
    const number = await provider.send("eth_blockNumber", []);
    console.log(JSON.stringify({ result: number, blocks }));
  } catch (e) {
    // ethers keeps the node's JSON-RPC error under e.error
    console.log(JSON.stringify({ code: e.code, error: e.error ?? null, blocks }));
  }
}
await provider.destroy();
process.exit(0);
