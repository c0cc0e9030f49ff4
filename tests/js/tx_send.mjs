// Transactions as a wallet sends them, through the gateway: a transfer, a contract
// call, the same signed bytes again, and a transaction signed for another chain.
// usage: node tx_send.mjs ethers|viem http://host:port/bsc/KEY PRIVATE_KEY CONTRACT
// Prints one JSON line with what it saw; exits non-zero on the first unexpected failure.
import { JsonRpcProvider, Wallet, parseEther } from "ethers";
import { createPublicClient, createWalletClient, http } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { bsc } from "viem/chains";

const [library, url, privateKey, contract] = process.argv.slice(2);
const to = "0x2222222222222222222222222222222222222222";
const data = "0x" + "7".padStart(64, "0");

async function viaEthers() {
  // cacheTimeout -1: ethers otherwise answers a repeated call (the pending nonce) from a
  // 250 ms cache, and an automining node mines faster than that
  const provider = new JsonRpcProvider(url, undefined, { pollingInterval: 250, batchMaxCount: 1, cacheTimeout: -1 });
  const wallet = new Wallet(privateKey, provider);
  const transfer = await wallet.sendTransaction({ to, value: parseEther("0.001") });
  const transferReceipt = await transfer.wait();
  const populated = await wallet.populateTransaction({ to: contract, data, gasLimit: 100000 });
  const serialized = await wallet.signTransaction(populated);
  const call = await provider.broadcastTransaction(serialized);
  const callReceipt = await call.wait();
  const again = await provider.send("eth_sendRawTransaction", [serialized]);
  const nonce = await provider.getTransactionCount(wallet.address, "pending");
  const other = await wallet.signTransaction({
    to, value: 1n, nonce, chainId: 97n, gasLimit: 21000n, maxFeePerGas: 10n ** 11n, maxPriorityFeePerGas: 10n ** 9n, type: 2,
  });
  let wrongChain = "";
  try {
    await provider.send("eth_sendRawTransaction", [other]);
  } catch (err) {
    wrongChain = err.error?.message ?? err.message;
  }
  provider.destroy();
  return {
    transfer: transfer.hash, transferStatus: transferReceipt.status, transferReceiptHash: transferReceipt.hash,
    call: call.hash, callStatus: callReceipt.status, callLogs: callReceipt.logs.length,
    again, wrongChain,
  };
}

async function viaViem() {
  const account = privateKeyToAccount(privateKey);
  const transport = http(url);
  const client = createPublicClient({ chain: bsc, transport, pollingInterval: 250 });
  const walletClient = createWalletClient({ account, chain: bsc, transport });
  const transfer = await walletClient.sendTransaction({ to, value: parseEther("0.001") });
  const transferReceipt = await client.waitForTransactionReceipt({ hash: transfer, pollingInterval: 250 });
  const request = await walletClient.prepareTransactionRequest({ to: contract, data, gas: 100000n });
  const serialized = await walletClient.signTransaction(request);
  const call = await walletClient.sendRawTransaction({ serializedTransaction: serialized });
  const callReceipt = await client.waitForTransactionReceipt({ hash: call, pollingInterval: 250 });
  const again = await walletClient.sendRawTransaction({ serializedTransaction: serialized });
  const nonce = await client.getTransactionCount({ address: account.address, blockTag: "pending" });
  const other = await account.signTransaction({
    to, value: 1n, nonce, chainId: 97, gas: 21000n, maxFeePerGas: 10n ** 11n, maxPriorityFeePerGas: 10n ** 9n, type: "eip1559",
  });
  let wrongChain = "";
  try {
    await walletClient.sendRawTransaction({ serializedTransaction: other });
  } catch (err) {
    wrongChain = err.details ?? err.shortMessage ?? err.message;
  }
  return {
    transfer, transferStatus: transferReceipt.status === "success" ? 1 : 0, transferReceiptHash: transferReceipt.transactionHash,
    call, callStatus: callReceipt.status === "success" ? 1 : 0, callLogs: callReceipt.logs.length,
    again, wrongChain,
  };
}

const seen = library === "ethers" ? await viaEthers() : await viaViem();
console.log(JSON.stringify(seen));
