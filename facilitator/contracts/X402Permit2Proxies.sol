// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.37;

/// @title The x402 Permit2 proxies, written for Tollgate's tests to their published interface.
/// @notice No package registry ships the x402 proxies, so the tests deploy these and put their
///         code at the canonical addresses (exact 0x402085c248EeA27D92E8b30b2C58ed07f9E20001,
///         upto 0x4020A4f3b7b90ccA423B9fabCc0CE57C6C240002). What a facilitator and a buyer see
///         is the published interface: the function signatures, the witness types and the
///         Permit2 call. A proxy is the Permit2 spender the buyer signs for; the witness binds
///         the recipient (and, for upto, the facilitator allowed to settle) into the signature,
///         so whoever sends the settlement cannot redirect the money.

/// Permit2's signature transfers (the part the proxies call).
interface ISignatureTransfer {
    struct TokenPermissions {
        address token;
        uint256 amount;
    }

    struct PermitTransferFrom {
        TokenPermissions permitted;
        uint256 nonce;
        uint256 deadline;
    }

    struct SignatureTransferDetails {
        address to;
        uint256 requestedAmount;
    }

    function permitWitnessTransferFrom(
        PermitTransferFrom calldata permit,
        SignatureTransferDetails calldata transferDetails,
        address owner,
        bytes32 witness,
        string calldata witnessTypeString,
        bytes calldata signature
    ) external;
}

/// EIP-2612's permit.
interface IERC20Permit {
    function permit(address owner, address spender, uint256 value, uint256 deadline, uint8 v, bytes32 r, bytes32 s)
        external;
}

/// What both proxies share: the Permit2 call, the checks before it, the optional EIP-2612 permit.
abstract contract Permit2ProxyBase {
    ISignatureTransfer public immutable PERMIT2;

    /// One settlement at a time (transient: nothing to initialise when the code is placed).
    bool private transient settling;

    event Settled();
    event SettledWithPermit();
    event EIP2612PermitFailedWithReason(address indexed token, address indexed owner, string reason);
    event EIP2612PermitFailedWithPanic(address indexed token, address indexed owner, uint256 errorCode);
    event EIP2612PermitFailedWithData(address indexed token, address indexed owner, bytes data);

    error InvalidPermit2Address();
    error InvalidDestination();
    error PaymentTooEarly();
    error InvalidOwner();
    error InvalidAmount();
    error Permit2612AmountMismatch();

    /// A signed EIP-2612 permit letting Permit2 spend the owner's tokens.
    struct EIP2612Permit {
        uint256 value;
        uint256 deadline;
        bytes32 r;
        bytes32 s;
        uint8 v;
    }

    constructor(address permit2) {
        if (permit2 == address(0)) revert InvalidPermit2Address();
        PERMIT2 = ISignatureTransfer(permit2);
    }

    modifier oneAtATime() {
        require(!settling, "reentrant settlement");
        settling = true;
        _;
        settling = false;
    }

    /// Moves `amount` of the permit's token from `owner` to `to` through Permit2, under the
    /// signature over the permit, this proxy as spender, and the witness.
    function _transfer(
        ISignatureTransfer.PermitTransferFrom calldata permit,
        uint256 amount,
        address owner,
        address to,
        uint256 validAfter,
        bytes32 witnessHash,
        string memory witnessTypeString,
        bytes calldata signature
    ) internal {
        if (amount == 0) revert InvalidAmount();
        if (owner == address(0)) revert InvalidOwner();
        if (to == address(0)) revert InvalidDestination();
        if (block.timestamp < validAfter) revert PaymentTooEarly();
        PERMIT2.permitWitnessTransferFrom(
            permit,
            ISignatureTransfer.SignatureTransferDetails({to: to, requestedAmount: amount}),
            owner,
            witnessHash,
            witnessTypeString,
            signature
        );
    }

    /// Lets Permit2 spend `owner`'s tokens with their EIP-2612 permit, for exactly the amount the
    /// Permit2 permit names. A permit that fails (used already, front-run) is reported in an
    /// event, not reverted on: the transfer then stands on whatever allowance there is.
    function _approveWithPermit(address token, address owner, EIP2612Permit calldata p, uint256 permitted) internal {
        if (p.value != permitted) revert Permit2612AmountMismatch();
        try IERC20Permit(token).permit(owner, address(PERMIT2), p.value, p.deadline, p.v, p.r, p.s) {}
        catch Error(string memory reason) {
            emit EIP2612PermitFailedWithReason(token, owner, reason);
        } catch Panic(uint256 code) {
            emit EIP2612PermitFailedWithPanic(token, owner, code);
        } catch (bytes memory data) {
            emit EIP2612PermitFailedWithData(token, owner, data);
        }
    }
}

/// x402 `exact` through Permit2: always the whole permitted amount, to the witness's `to`.
contract X402ExactPermit2Proxy is Permit2ProxyBase {
    string public constant WITNESS_TYPE_STRING =
        "Witness witness)TokenPermissions(address token,uint256 amount)Witness(address to,uint256 validAfter)";
    bytes32 public constant WITNESS_TYPEHASH = keccak256("Witness(address to,uint256 validAfter)");

    struct Witness {
        address to;
        uint256 validAfter;
    }

    constructor(address permit2) Permit2ProxyBase(permit2) {}

    function settle(
        ISignatureTransfer.PermitTransferFrom calldata permit,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) external oneAtATime {
        _settle(permit, owner, witness, signature);
        emit Settled();
    }

    function settleWithPermit(
        EIP2612Permit calldata permit2612,
        ISignatureTransfer.PermitTransferFrom calldata permit,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) external oneAtATime {
        _approveWithPermit(permit.permitted.token, owner, permit2612, permit.permitted.amount);
        _settle(permit, owner, witness, signature);
        emit SettledWithPermit();
    }

    function _settle(
        ISignatureTransfer.PermitTransferFrom calldata permit,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) private {
        bytes32 witnessHash = keccak256(abi.encode(WITNESS_TYPEHASH, witness.to, witness.validAfter));
        uint256 amount = permit.permitted.amount;
        _transfer(permit, amount, owner, witness.to, witness.validAfter, witnessHash, WITNESS_TYPE_STRING, signature);
    }
}

/// x402 `upto` through Permit2: any amount up to the permitted one, chosen by the facilitator
/// the witness names (and only by it), to the witness's `to`.
contract X402UptoPermit2Proxy is Permit2ProxyBase {
    string public constant WITNESS_TYPE_STRING =
        "Witness witness)TokenPermissions(address token,uint256 amount)Witness(address to,address facilitator,uint256 validAfter)";
    bytes32 public constant WITNESS_TYPEHASH = keccak256("Witness(address to,address facilitator,uint256 validAfter)");

    error UnauthorizedFacilitator();
    error AmountExceedsPermitted();

    struct Witness {
        address to;
        address facilitator;
        uint256 validAfter;
    }

    constructor(address permit2) Permit2ProxyBase(permit2) {}

    function settle(
        ISignatureTransfer.PermitTransferFrom calldata permit,
        uint256 amount,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) external oneAtATime {
        _authorized(permit, amount, witness);
        _settle(permit, amount, owner, witness, signature);
        emit Settled();
    }

    function settleWithPermit(
        EIP2612Permit calldata permit2612,
        ISignatureTransfer.PermitTransferFrom calldata permit,
        uint256 amount,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) external oneAtATime {
        _authorized(permit, amount, witness);
        _approveWithPermit(permit.permitted.token, owner, permit2612, permit.permitted.amount);
        _settle(permit, amount, owner, witness, signature);
        emit SettledWithPermit();
    }

    /// At most the permitted amount, settled by the facilitator the witness names.
    function _authorized(ISignatureTransfer.PermitTransferFrom calldata permit, uint256 amount, Witness calldata witness)
        private
        view
    {
        if (amount > permit.permitted.amount) revert AmountExceedsPermitted();
        if (msg.sender != witness.facilitator) revert UnauthorizedFacilitator();
    }

    function _settle(
        ISignatureTransfer.PermitTransferFrom calldata permit,
        uint256 amount,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) private {
        bytes32 witnessHash =
            keccak256(abi.encode(WITNESS_TYPEHASH, witness.to, witness.facilitator, witness.validAfter));
        _transfer(permit, amount, owner, witness.to, witness.validAfter, witnessHash, WITNESS_TYPE_STRING, signature);
    }
}
