"""Strategies for the custom string formats of Tollgate's OpenAPI document (scripts/api-contract).

The document marks what its validation checks beyond JSON Schema with a format: `address` (a
Solana or EVM address), `transaction-id` (a Solana signature or an EVM transaction hash) and
`webhook-url` (an https URL of a public address). schemathesis generates valid values of each
from these strategies.
"""

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


solana_address = st.binary(min_size=32, max_size=32).map(base58)
evm_address = st.binary(min_size=20, max_size=20).map(lambda b: "0x" + b.hex())
solana_signature = st.binary(min_size=64, max_size=64).map(base58)
evm_hash = st.binary(min_size=32, max_size=32).map(lambda b: "0x" + b.hex())
# Documentation-free public addresses that the test machine cannot reach: deliveries fail fast.
public_host = st.sampled_from(["93.184.216.34", "1.1.1.1", "8.8.8.8", "203.0.114.1"])
path = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=20)

schemathesis.openapi.format("address", st.one_of(solana_address, evm_address))
schemathesis.openapi.format("solana-address", solana_address.filter(lambda a: a != "1" * 32))
schemathesis.openapi.format("transaction-id", st.one_of(solana_signature, evm_hash))
schemathesis.openapi.format("webhook-url", st.builds(lambda h, p: f"https://{h}/{p}", public_host, path))


@schemathesis.hook
def filter_body(ctx, body):
    """What JSON Schema cannot say between two fields: a payer and a payee are on one chain family
    and are not the same wallet (the facilitator refuses either, rightly, with INVALID_RECIPIENT)."""
    if isinstance(body, dict):
        payer, payee = body.get("walletAddress"), body.get("recipientAddress")
        if isinstance(payer, str) and isinstance(payee, str):
            return payer.startswith("0x") == payee.startswith("0x") and payer != payee
    return True


@schemathesis.hook
def filter_case(ctx, case):
    """A token looked up on a network of its own family (another family is refused, rightly)."""
    mint = (case.path_parameters or {}).get("mintAddress")
    network = (case.query or {}).get("network")
    if isinstance(mint, str) and isinstance(network, str):
        return mint.startswith("0x") == network.startswith(("eip155:", "base", "ethereum", "polygon", "avalanche", "sei", "iotex", "peaq", "xlayer"))
    return True
