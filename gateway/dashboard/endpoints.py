"""Endpoints: both networks' URLs, both key forms, and copy-paste examples.

Every example reads the key from the ``RPC_KEY`` environment variable (the
same name ``gateway serve --demo`` prints), so nobody pastes a key into
source code by following our docs.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from gateway.config import NetworkConfig
from gateway.dashboard.views import config_of, login_required, render
from gateway.store.accounts import Account

ENV_VAR = "RPC_KEY"
CHAIN_TITLES = {
    56: "BNB Smart Chain",
    97: "BNB Smart Chain Testnet",
    204: "opBNB",
    5611: "opBNB Testnet",
}


@login_required
async def endpoints_page(request: web.Request, account: Account) -> web.StreamResponse:
    base = base_url(request)
    networks = [network_info(base, net) for net in config_of(request).networks]
    return render(
        request, "endpoints.html", {"networks": networks, "env_var": ENV_VAR}, account=account
    )


def base_url(request: web.Request) -> str:
    """``dashboard.public_url`` when set (behind a proxy), else this request's origin."""
    public = config_of(request).dashboard.public_url.rstrip("/")
    return public or f"{request.scheme}://{request.host}"


def network_info(base: str, net: NetworkConfig) -> dict[str, Any]:
    url = base + net.prefix
    return {
        "name": net.name,
        "title": CHAIN_TITLES.get(net.chain_id, net.name),
        "chain_id": net.chain_id,
        "url": url,
        "path_url": f"{url}/<API_KEY>",
        "examples": examples(url, net.chain_id),
    }


def examples(url: str, chain_id: int) -> list[dict[str, str]]:
    """(title, language, code) examples for one network."""
    body = '{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}'
    v = ENV_VAR
    return [
        {
            "title": "curl, key in the path",
            "lang": "shell",
            "code": f"export {v}=<your key>\n"
            f'curl -s -X POST "{url}/${v}" \\\n'
            f"  -H 'Content-Type: application/json' \\\n  -d '{body}'",
        },
        {
            "title": "curl, key in the Authorization header",
            "lang": "shell",
            "code": f'curl -s -X POST "{url}" \\\n'
            f'  -H "Authorization: Bearer ${v}" \\\n'
            f"  -H 'Content-Type: application/json' \\\n  -d '{body}'",
        },
        {
            "title": "web3.py",
            "lang": "python",
            "code": "import os\nfrom web3 import Web3\n\n"
            f'w3 = Web3(Web3.HTTPProvider("{url}/" + os.environ["{v}"]))\n'
            "# or keep the key out of URLs and logs:\n"
            f'# Web3.HTTPProvider("{url}", request_kwargs={{"headers": '
            f'{{"Authorization": "Bearer " + os.environ["{v}"]}}}})\n'
            "print(w3.eth.block_number)",
        },
        {
            "title": "ethers (v6)",
            "lang": "javascript",
            "code": 'import { FetchRequest, JsonRpcProvider } from "ethers";\n\n'
            f'const req = new FetchRequest("{url}");\n'
            f'req.setHeader("Authorization", `Bearer ${{process.env.{v}}}`);\n'
            f"const provider = new JsonRpcProvider(req, {chain_id}, "
            "{ staticNetwork: true });\n"
            "console.log(await provider.getBlockNumber());",
        },
    ]
