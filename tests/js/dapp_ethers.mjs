// What a dapp does with ethers v6 in its first minute, against the gateway.
// usage: node dapp_ethers.mjs http://host:port/bsc/KEY PRIVATE_KEY
// Prints one JSON line with what it saw; exits non-zero on the first failure.
import { JsonRpcProvider, Wallet, parseEther } from "ethers";

const [url, privateKey] = process.argv.slice(2);
const provider = new JsonRpcProvider(url, undefined, { pollingInterval: 250 });
const wallet = new Wallet(privateKey, provider);
const to = "0x2222222222222222222222222222222222222222";

const network = await provider.getNetwork();
const blockNumber = await provider.getBlockNumber();
const clientVersion = await provider.send("web3_clientVersion", []);
const balance = await provider.getBalance(wallet.address);
const nonce = await provider.getTransactionCount(wallet.address, "pending");
const code = await provider.getCode(wallet.address);
const fees = await provider.getFeeData();
// BSC's base fee is 0, so ethers' getFeeData leaves the EIP-1559 fields null
// (as against BSC itself); wallets then ask the node for the tip directly.
const priority = await provider.send("eth_maxPriorityFeePerGas", []);
const history = await provider.send("eth_feeHistory", ["0x4", "latest", [25, 75]]);
const gas = await provider.estimateGas({ from: wallet.address, to, value: parseEther("0.001") });
const tx = await wallet.sendTransaction({ to, value: parseEther("0.001") });
const receipt = await tx.wait();
const after = await provider.getTransactionCount(wallet.address, "latest");
const fetched = await provider.getTransaction(tx.hash);
console.log(
  JSON.stringify({
    chainId: Number(network.chainId),
    blockNumber,
    clientVersion,
    balance: balance.toString(),
    nonce,
    code,
    gasPrice: fees.gasPrice?.toString(),
    maxPriorityFeePerGas: BigInt(priority).toString(),
    feeHistoryBlocks: history.gasUsedRatio.length,
    gas: gas.toString(),
    txHash: tx.hash,
    receipt: { status: receipt.status, from: receipt.from, hash: receipt.hash, block: receipt.blockNumber },
    fetchedFrom: fetched.from,
    nonceAfter: after,
    address: wallet.address,
  }),
);
provider.destroy();
