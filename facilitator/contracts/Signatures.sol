// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.37;

/// Signatures from EOAs (ECDSA, low-s, 65 bytes) or contract accounts (EIP-1271).
library Signatures {
    bytes4 internal constant ERC1271_MAGIC = 0x1626ba7e;
    uint256 internal constant HALF_ORDER = 0x7FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF5D576E7357A4501DDFE92F46681B20A0;

    /// The address that signed `digest` (ECDSA), or zero where the signature is malformed.
    function recover(bytes32 digest, bytes memory signature) internal pure returns (address) {
        if (signature.length != 65) {
            return address(0);
        }
        bytes32 r;
        bytes32 s;
        uint8 v;
        assembly {
            r := mload(add(signature, 32))
            s := mload(add(signature, 64))
            v := byte(0, mload(add(signature, 96)))
        }
        if (uint256(s) > HALF_ORDER || (v != 27 && v != 28)) {
            return address(0);
        }
        return ecrecover(digest, v, r, s);
    }

    /// Whether `signer` signed `digest`: by EIP-1271 when it has code, by ECDSA otherwise.
    function valid(address signer, bytes32 digest, bytes memory signature) internal view returns (bool) {
        if (signer == address(0)) {
            return false;
        }
        if (signer.code.length > 0) {
            (bool ok, bytes memory answer) =
                signer.staticcall(abi.encodeWithSelector(ERC1271_MAGIC, digest, signature));
            return ok && answer.length == 32 && abi.decode(answer, (bytes4)) == ERC1271_MAGIC;
        }
        return recover(digest, signature) == signer;
    }
}
