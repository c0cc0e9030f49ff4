// What a dapp does with viem 2 in its first minute, against the gateway.
// usage: node dapp_viem.mjs http://host:port/bsc/KEY PRIVATE_KEY
// Prints one JSON line with what it saw; exits non-zero on the first failure.
import { createPublicClient, createWalletClient, http, parseEther } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { bsc } from "viem/chains";

const [url, privateKey] = process.argv.slice(2);
const account = privateKeyToAccount(privateKey);
const transport = http(url);
const client = createPublicClient({ chain: bsc, transport, pollingInterval: 250 });
const walletClient = createWalletClient({ account, chain: bsc, transport });
const to = "0x2222222222222222222222222222222222222222";

const chainId = await client.getChainId();
const blockNumber = await client.getBlockNumber();
const clientVersion = await client.request({ method: "web3_clientVersion" });
const balance = await client.getBalance({ address: account.address });
const nonce = await client.getTransactionCount({ address: account.address, blockTag: "pending" });
const code = await client.getCode({ address: account.address });
const gasPrice = await client.getGasPrice();
const priority = await client.estimateMaxPriorityFeePerGas();
const fees = await client.estimateFeesPerGas();
const history = await client.getFeeHistory({ blockCount: 4, rewardPercentiles: [25, 75] });
const gas = await client.estimateGas({ account, to, value: parseEther("0.001") });
const hash = await walletClient.sendTransaction({ to, value: parseEther("0.001") });
const receipt = await client.waitForTransactionReceipt({ hash, pollingInterval: 250 });
const after = await client.getTransactionCount({ address: account.address });
const fetched = await client.getTransaction({ hash });
console.log(
  JSON.stringify({
    chainId,
    blockNumber: Number(blockNumber),
    clientVersion,
    balance: balance.toString(),
    nonce,
    code: code ?? "0x",
    gasPrice: gasPrice.toString(),
    maxPriorityFeePerGas: priority.toString(),
    maxFeePerGas: fees.maxFeePerGas.toString(),
    feeHistoryBlocks: history.gasUsedRatio.length,
    gas: gas.toString(),
    txHash: hash,
    receipt: { status: receipt.status, from: receipt.from, hash: receipt.transactionHash, block: Number(receipt.blockNumber) },
    fetchedFrom: fetched.from,
    nonceAfter: after,
    address: account.address,
  }),
);
