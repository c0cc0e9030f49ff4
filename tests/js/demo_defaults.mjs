// A dapp on ethers v6 with every default, against the demo: approve-then-swap and a
// Transfer listener, as a dapp's first page does.
// usage: node demo_defaults.mjs http://host:port/bsc/KEY PRIVATE_KEY TOKEN PAIRS
// The provider is JsonRpcProvider(url) with nothing changed: ethers' 250 ms request
// cache and 4 s polling stay on. On a chain that makes blocks on its own clock (BSC,
// the demo), the swap's nonce is asked after the approve's receipt, well past the
// cache, so it is the one after the approve's; `contract.on("Transfer")` matches the
// token's logs by the Keccak hash of the event's signature.
// Prints one JSON line; exits non-zero on the first failure.
import { Contract, Interface, JsonRpcProvider, Wallet } from "ethers";

const [url, privateKey, token, pairs] = process.argv.slice(2);
const provider = new JsonRpcProvider(url);
const wallet = new Wallet(privateKey, provider);
const erc20 = new Interface([
  "function approve(address spender, uint256 amount) returns (bool)",
  "event Transfer(address indexed from, address indexed to, uint256 value)",
]);
const router = new Interface([
  "function swapExactTokensForTokens(uint256 amountIn, uint256 amountOutMin, address[] path, address to, uint256 deadline) returns (uint256[] amounts)",
]);
const ROUTER = "0x10ED43C718714eb63d5aA57B78B54704E256024E";
const seen = { pairs: 0, receipts: 0, nonces: [], transfers: [] };

const contract = new Contract(token, erc20, provider);
const transfer = new Promise((resolve) => {
  contract.on("Transfer", (from, to, value, event) => {
    if (seen.transfers.length < 3) {
      seen.transfers.push({ from, to, value: value.toString(), block: event.log.blockNumber });
    }
    resolve();
  });
});

async function send(data, to) {
  const tx = await wallet.sendTransaction({ to, data });
  seen.nonces.push(tx.nonce);
  const receipt = await tx.wait();
  if (receipt.status !== 1) throw new Error(`reverted: ${tx.hash}`);
  seen.receipts += 1;
}

for (let i = 0; i < Number(pairs); i++) {
  await send(erc20.encodeFunctionData("approve", [ROUTER, 10n ** 18n]), token);
  const deadline = Math.floor(Date.now() / 1000) + 600;
  const path = [token, "0xbb4CdB9CBd36B01bD1cBaEBF2De08d9173bc095c"];
  const swap = router.encodeFunctionData("swapExactTokensForTokens", [
    10n ** 18n, 0n, path, wallet.address, deadline,
  ]);
  await send(swap, ROUTER);
  seen.pairs += 1;
}
let timer;
await Promise.race([
  transfer,
  new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error("no Transfer event in 30 s")), 30_000);
  }),
]);
clearTimeout(timer);
await contract.removeAllListeners();
seen.nonce = await provider.getTransactionCount(wallet.address, "latest");
console.log(JSON.stringify(seen));
provider.destroy();
