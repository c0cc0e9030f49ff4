// A dapp loading event history with ethers v6 defaults (JsonRpcProvider batches the
// calls of one tick): several contract.queryFilter calls at once on a fresh provider.
// usage: node query_filter.mjs URL CONTRACT N
// Prints {"ok":true,"logs":[...counts]} or {"ok":false,"error":...}; exit 0 either way.
import { Contract, JsonRpcProvider } from "ethers";

const [url, address, nText] = process.argv.slice(2);
const provider = new JsonRpcProvider(url);
const contract = new Contract(address, ["event Ping(uint256 n)"], provider);
try {
  const results = await Promise.all(
    Array.from({ length: Number(nText) }, (_, i) => contract.queryFilter("Ping", i * 100, i * 100 + 99)),
  );
  console.log(JSON.stringify({ ok: true, logs: results.map((r) => r.length) }));
} catch (error) {
  console.log(JSON.stringify({ ok: false, error: String(error).slice(0, 500) }));
}
provider.destroy();
process.exit(0);
