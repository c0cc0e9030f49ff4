// A dapp's first seconds on the free plan, with a library's defaults: a burst of reads
// at once (ethers v6 JsonRpcProvider batches one tick's calls; viem's http transport
// with batch: true does too), then one read after another as fast as they come back.
// usage: node free_plan_pace.mjs ethers|viem URL BURST SECONDS
// Prints one JSON line: {"ok", "burst_s", "calls", "failed", "errors", "elapsed_s",
// "max_call_s", "p50_call_s", "p99_call_s"}; exit 0 either way.
import { JsonRpcProvider } from "ethers";
import { createPublicClient, http } from "viem";

const [library, url, burstText, secondsText] = process.argv.slice(2);
const burst = Number(burstText);
const seconds = Number(secondsText);

// Distinct addresses: each read is its own call (no library folds two into one).
const address = (i) => "0x" + (i + 1).toString(16).padStart(40, "0");

let read;
let close = () => {};
if (library === "ethers") {
  const provider = new JsonRpcProvider(url); // every default: batching, network detection
  read = (i) => provider.getBalance(address(i));
  close = () => provider.destroy();
} else {
  const client = createPublicClient({ transport: http(url, { batch: true }) });
  read = (i) => client.getBalance({ address: address(i) });
}

const latencies = [];
const errors = [];
let failed = 0;
async function timed(i) {
  const t0 = performance.now();
  try {
    await read(i);
  } catch (error) {
    failed += 1;
    if (errors.length < 3) errors.push(String(error?.shortMessage ?? error).slice(0, 300));
  }
  latencies.push((performance.now() - t0) / 1000);
}

const start = performance.now();
await Promise.all(Array.from({ length: burst }, (_, i) => timed(i)));
const burstS = (performance.now() - start) / 1000;
let calls = burst;
const paceStart = performance.now();
while ((performance.now() - paceStart) / 1000 < seconds) {
  await timed(calls);
  calls += 1;
}
const elapsed = (performance.now() - start) / 1000;
latencies.sort((a, b) => a - b);
const at = (q) => latencies[Math.min(latencies.length - 1, Math.floor(q * latencies.length))];
console.log(
  JSON.stringify({
    ok: failed === 0,
    burst_s: burstS,
    calls,
    failed,
    errors,
    elapsed_s: elapsed,
    max_call_s: latencies[latencies.length - 1],
    p50_call_s: at(0.5),
    p99_call_s: at(0.99),
  }),
);
close();
process.exit(0);
