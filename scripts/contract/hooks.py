"""Strategies for the custom string formats of Tollgate's OpenAPI document (scripts/api-contract).

The document marks what its validation checks beyond JSON Schema with a format: `address` (a
Solana or EVM address), `custodial-address` (a wallet of the caller's account), `transaction-id`
(a Solana signature or an EVM transaction hash), `webhook-url` (an https URL of a public
address), and others below. schemathesis generates valid values of each from these strategies.
"""

import itertools
import os

import schemathesis
from hypothesis import strategies as st

ALPHABET = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"


def base58(data: bytes) -> str:
    number = int.from_bytes(data, "big")
    text = ""
    while number:
        number, digit = divmod(number, 58)
        text = ALPHABET[digit] + text
    leading = len(data) - len(data.lstrip(b"\0"))
    return "1" * leading + text


# Not the system program (32 zero bytes): no account may pay it, which the chain, not JSON Schema,
# knows (the document's patterns exclude it where a payment goes to the address).
solana_address = st.binary(min_size=32, max_size=32).map(base58).filter(lambda a: a != "1" * 32)
evm_address = st.binary(min_size=20, max_size=20).map(lambda b: "0x" + b.hex())
solana_signature = st.binary(min_size=64, max_size=64).map(base58)
evm_hash = st.binary(min_size=32, max_size=32).map(lambda b: "0x" + b.hex())
# Documentation-free public addresses that the test machine cannot reach: deliveries fail fast.
public_host = st.sampled_from(["93.184.216.34", "1.1.1.1", "8.8.8.8", "203.0.114.1"])
path = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=20)

schemathesis.openapi.format("address", st.one_of(solana_address, evm_address))
# A custodial wallet of the key's account, funded (scripts/api-contract creates it), so hosted
# sends get past the ownership check to the balance, bounds and the chain.
CUSTODIAL = os.environ.get("TOLLGATE_CONTRACT_WALLET")
schemathesis.openapi.format(
    "custodial-address", st.just(CUSTODIAL) if CUSTODIAL else st.one_of(solana_address, evm_address)
)
schemathesis.openapi.format("resource-url", st.builds(lambda p: f"https://seller.example/{p}", path))
schemathesis.openapi.format("asset", st.one_of(st.just("native"), solana_address, evm_address))
# A new key per request: hypothesis would otherwise draw the same few keys for different bodies,
# and the answer would be 409 IDEMPOTENCY_CONFLICT (rightly) instead of the operation's own.
KEYS = itertools.count()
schemathesis.openapi.format(
    "idempotency-key",
    st.builds(lambda prefix: f"{prefix}-{next(KEYS)}", st.text(alphabet=[chr(c) for c in range(0x21, 0x7F)], max_size=40)),
)
schemathesis.openapi.format("solana-address", solana_address)
schemathesis.openapi.format("transaction-id", st.one_of(solana_signature, evm_hash))
schemathesis.openapi.format("webhook-url", st.builds(lambda h, p: f"https://{h}/{p}", public_host, path))


def decimals(number) -> int:
    """Digits after the point of a JSON number as Python holds it."""
    text = repr(number)
    if "e" in text or "E" in text:
        mantissa, exponent = text.lower().split("e")
        return max(0, len(mantissa.split(".")[1]) if "." in mantissa else 0) - int(exponent)
    return len(text.split(".")[1].rstrip("0")) if "." in text else 0


def is_evm(text) -> bool:
    return isinstance(text, str) and text.startswith(("0x", "eip155:"))


@schemathesis.hook
def filter_case(ctx, case):
    """What JSON Schema cannot say across fields, which the facilitator checks, rightly:
    - a payer and a payee are on one chain family, and are two wallets;
    - a named network and a token asset are of the addresses' family;
    - an amount has no more decimals than the family's native unit (9 for SOL, 18 for ETH);
    - a token is looked up on a network of its own family."""
    body = case.body if isinstance(case.body, dict) else {}
    wallet = body.get("walletAddress", body.get("address"))
    payee = body.get("recipientAddress")
    if isinstance(wallet, str) and isinstance(payee, str) and (is_evm(wallet) != is_evm(payee) or wallet == payee):
        return False
    network = body.get("network")
    if isinstance(wallet, str) and isinstance(network, str) and is_evm(wallet) != is_evm(network):
        return False
    asset = body.get("asset")
    if isinstance(wallet, str) and isinstance(asset, str) and asset != "native" and is_evm(wallet) != is_evm(asset):
        return False
    if isinstance(wallet, str):
        # Decimals of the native unit, and the most its atomic units hold (u64 lamports, u128 wei).
        places, most = (18, 2**128 - 1) if is_evm(wallet) else (9, 2**64 - 1)
        for field in ("amount", "expectedAmount", "priorityFee"):
            value = body.get(field)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                if decimals(value) > places or value * 10**places > most:
                    return False
    mint = (case.path_parameters or {}).get("mintAddress")
    query_network = (case.query or {}).get("network")
    if isinstance(mint, str) and isinstance(query_network, str) and is_evm(mint) != is_evm(query_network):
        return False
    return True
