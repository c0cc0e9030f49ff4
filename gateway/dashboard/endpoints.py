"""Endpoints: both networks' HTTP and WebSocket URLs, both key forms, and copy-paste examples.

Every example reads the key from the ``RPC_KEY`` environment variable (the
same name ``gateway serve --demo`` prints), so nobody pastes a key into
source code by following our docs. HTTP examples send the key in the
``Authorization`` header; WebSocket URLs carry it in the path, because a
browser cannot set headers on an upgrade. The WebSocket URL has
the ``wss`` scheme exactly when the page's own base URL is ``https``.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from gateway.config import NetworkConfig
from gateway.dashboard.plan import describe
from gateway.dashboard.views import config_of, fmt_number, login_required, render
from gateway.store.accounts import Account

ENV_VAR = "RPC_KEY"
# The chain objects viem exports for our networks (``viem/chains``).
VIEM_CHAINS = {56: "bsc", 97: "bscTestnet", 204: "opBNB", 5611: "opBNBTestnet"}
CHAIN_TITLES = {
    56: "BNB Smart Chain",
    97: "BNB Smart Chain Testnet",
    204: "opBNB",
    5611: "opBNB Testnet",
}


@login_required
async def endpoints_page(request: web.Request, account: Account) -> web.StreamResponse:
    base = base_url(request)
    cfg = config_of(request)
    networks = [network_info(base, net, ws=cfg.ws.enabled) for net in cfg.networks]
    try:
        plan: dict[str, Any] | None = describe(cfg.plan(account.plan))
    except KeyError:  # a plan taken out of the config: the page still lists the URLs
        plan = None
    context = {
        "networks": networks,
        "env_var": ENV_VAR,
        "ws": cfg.ws.enabled,
        "plan": plan,
        "max_batch": fmt_number(cfg.limits.max_batch),
    }
    return render(request, "endpoints.html", context, account=account)


def base_url(request: web.Request) -> str:
    """``dashboard.public_url`` when set (behind a proxy), else this request's origin."""
    public = config_of(request).dashboard.public_url.rstrip("/")
    return public or f"{request.scheme}://{request.host}"


def ws_base(base: str) -> str:
    """``http(s)://host`` -> ``ws(s)://host``."""
    scheme, sep, rest = base.partition("://")
    return ("wss" if scheme == "https" else "ws") + sep + rest


def network_info(base: str, net: NetworkConfig, *, ws: bool = True) -> dict[str, Any]:
    url = base + net.prefix
    ws_url = ws_base(base) + net.prefix if ws else ""
    return {
        "name": net.name,
        "title": CHAIN_TITLES.get(net.chain_id, net.name),
        "chain_id": net.chain_id,
        "url": url,
        "path_url": f"{url}/<API_KEY>",
        "ws_url": f"{ws_url}/<API_KEY>" if ws else "",
        "examples": examples(url, net.chain_id, ws_url),
    }


def examples(url: str, chain_id: int, ws_url: str = "") -> list[dict[str, str]]:
    """(title, language, code) examples for one network; ``ws_url`` "" when WebSocket is off."""
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
        _viem(url, chain_id, ws_url),
    ]


def _viem(url: str, chain_id: int, ws_url: str) -> dict[str, str]:
    v = ENV_VAR
    chain = VIEM_CHAINS.get(chain_id)
    imports = 'import { createPublicClient, http } from "viem";\n'
    if chain:
        imports += f'import {{ {chain} }} from "viem/chains";\n'
    code = (
        imports
        + "\nconst client = createPublicClient({\n"
        + (f"  chain: {chain},\n" if chain else "")
        + f'  transport: http("{url}", {{\n'
        + f"    fetchOptions: {{ headers: {{ Authorization: `Bearer ${{process.env.{v}}}` }} }},\n"
        + "  }),\n});\n"
        + "console.log(await client.getBlockNumber());"
    )
    if ws_url:
        code += (
            "\n\n// Subscriptions over WebSocket (the key in the path: a browser\n"
            "// cannot set headers on a WebSocket):\n"
            '// import { webSocket } from "viem";\n'
            f"// transport: webSocket(`{ws_url}/${{process.env.{v}}}`)\n"
            "// client.watchBlockNumber({ onBlockNumber: console.log })"
        )
    return {"title": "viem", "lang": "javascript", "code": code}
