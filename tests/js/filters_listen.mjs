// Contract events over HTTP through the gateway, with each library's default options:
// ethers v6 JsonRpcProvider + contract.on (eth_newFilter + eth_getFilterChanges, 4 s
// polling) and viem watchContractEvent (HTTP: a filter polled every 4 s).
// usage: node filters_listen.mjs URL CONTRACT WANT
// Prints {"ready":...} once both listen, then one line per event
// {"lib":"ethers"|"viem","n":N,"tx":HASH}, and {"done":true} once each library has
// WANT events (or after 90 s). Library errors are printed as {"lib":..,"error":..}.
import { Contract, JsonRpcProvider } from "ethers";
import { createPublicClient, http, parseAbi } from "viem";

const [url, address, wantText] = process.argv.slice(2);
const want = Number(wantText);
const counts = { ethers: 0, viem: 0 };
let finish;
const finished = new Promise((resolve) => {
  finish = resolve;
});
const seen = (lib, n, tx) => {
  console.log(JSON.stringify({ lib, n: Number(n), tx }));
  counts[lib] += 1;
  if (counts.ethers >= want && counts.viem >= want) finish();
};

const provider = new JsonRpcProvider(url);
const network = await provider.getNetwork();
const contract = new Contract(address, ["event Ping(uint256 n)"], provider);
await contract.on("Ping", (n, event) => seen("ethers", n, event.log.transactionHash));

const client = createPublicClient({ transport: http(url) });
const unwatch = client.watchContractEvent({
  address,
  abi: parseAbi(["event Ping(uint256 n)"]),
  eventName: "Ping",
  onLogs: (logs) => logs.forEach((log) => seen("viem", log.args.n, log.transactionHash)),
  onError: (error) => console.log(JSON.stringify({ lib: "viem", error: String(error) })),
});
console.log(JSON.stringify({ ready: true, chainId: Number(network.chainId) }));

const timer = setTimeout(finish, 90_000);
await finished;
clearTimeout(timer);
unwatch();
await contract.removeAllListeners();
provider.destroy();
console.log(JSON.stringify({ done: true, counts }));
process.exit(0);
