// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.37;

import {Signatures} from "./Signatures.sol";

/// @title A small ERC-20 with EIP-3009 transferWithAuthorization and receiveWithAuthorization,
///        for Tollgate's tests.
/// @notice Mintable by its deployer. EIP-712 domain: name, version "2", chain id, this contract.
///         Signatures from contract accounts are checked with EIP-1271.
///         For attack tests, its deployer can make it deliver less than it says: keep a fee on
///         every transfer (`setTransferFeeBps`, paid to the deployer), or move nothing at all
///         while reporting success (`setHollow`). Both are off unless set.
contract TollgateTestToken {
    string public name;
    string public symbol;
    uint8 public immutable decimals;
    uint256 public totalSupply;
    address public immutable minter;

    mapping(address => uint256) public balanceOf;
    mapping(address => mapping(address => uint256)) public allowance;
    mapping(address => mapping(bytes32 => bool)) private usedAuthorizations;
    uint256 public transferFeeBps;
    bool public hollow;

    bytes32 public constant TRANSFER_WITH_AUTHORIZATION_TYPEHASH = keccak256(
        "TransferWithAuthorization(address from,address to,uint256 value,uint256 validAfter,uint256 validBefore,bytes32 nonce)"
    );
    bytes32 public constant RECEIVE_WITH_AUTHORIZATION_TYPEHASH = keccak256(
        "ReceiveWithAuthorization(address from,address to,uint256 value,uint256 validAfter,uint256 validBefore,bytes32 nonce)"
    );
    bytes32 private constant DOMAIN_TYPEHASH =
        keccak256("EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)");

    event Transfer(address indexed from, address indexed to, uint256 value);
    event Approval(address indexed owner, address indexed spender, uint256 value);
    event AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce);

    constructor(string memory name_, string memory symbol_, uint8 decimals_) {
        name = name_;
        symbol = symbol_;
        decimals = decimals_;
        minter = msg.sender;
    }

    function version() external pure returns (string memory) {
        return "2";
    }

    function DOMAIN_SEPARATOR() public view returns (bytes32) {
        return keccak256(abi.encode(DOMAIN_TYPEHASH, keccak256(bytes(name)), keccak256("2"), block.chainid, address(this)));
    }

    function mint(address to, uint256 value) external {
        require(msg.sender == minter, "only the minter mints");
        totalSupply += value;
        balanceOf[to] += value;
        emit Transfer(address(0), to, value);
    }

    function setTransferFeeBps(uint256 bps) external {
        require(msg.sender == minter, "only the minter sets the fee");
        require(bps <= 10000, "a fee is at most the whole");
        transferFeeBps = bps;
    }

    function setHollow(bool hollow_) external {
        require(msg.sender == minter, "only the minter makes it hollow");
        hollow = hollow_;
    }

    function transfer(address to, uint256 value) external returns (bool) {
        _move(msg.sender, to, value);
        return true;
    }

    function approve(address spender, uint256 value) external returns (bool) {
        allowance[msg.sender][spender] = value;
        emit Approval(msg.sender, spender, value);
        return true;
    }

    function transferFrom(address from, address to, uint256 value) external returns (bool) {
        uint256 allowed = allowance[from][msg.sender];
        require(allowed >= value, "allowance exceeded");
        if (allowed != type(uint256).max) {
            allowance[from][msg.sender] = allowed - value;
        }
        _move(from, to, value);
        return true;
    }

    function authorizationState(address authorizer, bytes32 nonce) external view returns (bool) {
        return usedAuthorizations[authorizer][nonce];
    }

    /// EIP-3009 with a (v, r, s) signature.
    function transferWithAuthorization(
        address from,
        address to,
        uint256 value,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce,
        uint8 v,
        bytes32 r,
        bytes32 s
    ) external {
        _authorizedMove(
            TRANSFER_WITH_AUTHORIZATION_TYPEHASH, from, to, value, validAfter, validBefore, nonce, abi.encodePacked(r, s, v)
        );
    }

    /// EIP-3009 with a packed signature (65 bytes from an EOA; anything an EIP-1271 wallet accepts).
    function transferWithAuthorization(
        address from,
        address to,
        uint256 value,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce,
        bytes memory signature
    ) external {
        _authorizedMove(TRANSFER_WITH_AUTHORIZATION_TYPEHASH, from, to, value, validAfter, validBefore, nonce, signature);
    }

    /// EIP-3009's receive form: only the payee may submit it, so a signed authorization seen in
    /// flight cannot be front-run into a transfer its payee did not make. (v, r, s) signature.
    function receiveWithAuthorization(
        address from,
        address to,
        uint256 value,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce,
        uint8 v,
        bytes32 r,
        bytes32 s
    ) external {
        require(msg.sender == to, "caller must be the payee");
        _authorizedMove(
            RECEIVE_WITH_AUTHORIZATION_TYPEHASH, from, to, value, validAfter, validBefore, nonce, abi.encodePacked(r, s, v)
        );
    }

    /// EIP-3009's receive form with a packed signature.
    function receiveWithAuthorization(
        address from,
        address to,
        uint256 value,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce,
        bytes memory signature
    ) external {
        require(msg.sender == to, "caller must be the payee");
        _authorizedMove(RECEIVE_WITH_AUTHORIZATION_TYPEHASH, from, to, value, validAfter, validBefore, nonce, signature);
    }

    function _authorizedMove(
        bytes32 typehash,
        address from,
        address to,
        uint256 value,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce,
        bytes memory signature
    ) private {
        require(block.timestamp > validAfter, "authorization is not yet valid");
        require(block.timestamp < validBefore, "authorization is expired");
        require(!usedAuthorizations[from][nonce], "authorization is used");
        bytes32 structHash =
            keccak256(abi.encode(typehash, from, to, value, validAfter, validBefore, nonce));
        bytes32 digest = keccak256(abi.encodePacked("\x19\x01", DOMAIN_SEPARATOR(), structHash));
        require(Signatures.valid(from, digest, signature), "invalid signature");
        usedAuthorizations[from][nonce] = true;
        emit AuthorizationUsed(from, nonce);
        _move(from, to, value);
    }

    function _move(address from, address to, uint256 value) private {
        require(to != address(0), "transfer to the zero address");
        uint256 held = balanceOf[from];
        require(held >= value, "balance too low");
        if (hollow) {
            return;
        }
        uint256 fee = value * transferFeeBps / 10000;
        balanceOf[from] = held - value;
        balanceOf[to] += value - fee;
        emit Transfer(from, to, value - fee);
        if (fee > 0) {
            balanceOf[minter] += fee;
            emit Transfer(from, minter, fee);
        }
    }
}
