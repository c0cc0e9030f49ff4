// The real EVM node the tests start (tests/helpers/hardhat.py): chain id from
// HARDHAT_CHAIN_ID (56 or 204), so it stands in for a BSC or opBNB node.
module.exports = {
  networks: {
    hardhat: {
      chainId: Number(process.env.HARDHAT_CHAIN_ID || 56),
    },
  },
};
