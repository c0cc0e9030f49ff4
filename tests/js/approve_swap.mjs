// Two transactions back to back, as a dapp's approve-then-swap sends them, with ethers v6.
// usage: node approve_swap.mjs http://host:port/bsc/KEY PRIVATE_KEY PAIRS
// After each receipt it asks eth_blockNumber at once: the gateway must never answer a
// block below the receipt's (a dapp reading its own write). Prints one JSON line;
// exits non-zero on the first failure (a "nonce too low" on the second transaction).
//
// ethers shares identical requests made within 250 ms (cacheTimeout) in the client:
// on a chain that mines a transaction at once (Hardhat's automining) the swap would
// take the approve's nonce from that client-side cache and fail against any endpoint,
// the node itself included. So the cache is off here and every nonce is the gateway's.
// The demo makes blocks on its own clock as BSC does and needs no such change:
// demo_defaults.mjs runs the same pairs with ethers' defaults.
import { JsonRpcProvider, Wallet, parseEther } from "ethers";

const [url, privateKey, pairs] = process.argv.slice(2);
const provider = new JsonRpcProvider(url, undefined, { pollingInterval: 100, cacheTimeout: -1 });
const wallet = new Wallet(privateKey, provider);
const to = "0x2222222222222222222222222222222222222222";
const seen = { pairs: 0, receipts: 0, behind: [] };

async function step() {
  const tx = await wallet.sendTransaction({ to, value: parseEther("0.001") });
  const receipt = await tx.wait();
  seen.receipts += 1;
  const head = Number(await provider.send("eth_blockNumber", []));
  if (head < receipt.blockNumber) seen.behind.push([receipt.blockNumber, head]);
}

for (let i = 0; i < Number(pairs); i++) {
  await step(); // approve
  await step(); // swap, with the nonce after the approve's
  seen.pairs += 1;
}
seen.nonce = await provider.getTransactionCount(wallet.address, "latest");
console.log(JSON.stringify(seen));
provider.destroy();
