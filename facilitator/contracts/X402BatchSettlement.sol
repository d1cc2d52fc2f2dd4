// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.37;

import {Signatures} from "./Signatures.sol";
import {IERC20Permit, ISignatureTransfer} from "./X402Permit2Proxies.sol";

/// @title x402's batch-settlement channels, written for Tollgate's tests to their published interface.
/// @notice No package registry ships `x402BatchSettlement` and its deposit collectors, so the tests
///         deploy these and put their code at the canonical addresses (settlement
///         0x4020074e9dF2ce1deE5A9C1b5c3f541D02a10003, ERC-3009 collector
///         0x4020806089470a89826cB9fB1f4059150b550004, Permit2 collector
///         0x4020425FAf3B746C082C2f942b4E5159887B0005). What a facilitator, a seller and a buyer
///         see is the published interface: function signatures, the EIP-712 domain
///         ("x402 Batch Settlement", "1") and types, the collectors' data, the view functions.
///         None of them keeps an immutable or reads its own address at build time, so their
///         code works wherever it is placed.
///
///         A channel escrows a payer's tokens for one receiver. The payer signs cumulative
///         vouchers off chain; the receiver side claims the latest (accounting only), and
///         `settle` sweeps everything a receiver has claimed in one token transfer. The payer
///         leaves by a cooperative refund from the receiver side, or by a timed withdrawal whose
///         delay gives the receiver time to claim what it was promised.
///
///         Accounting, per channel: `balance` = deposits - refunds - withdrawals, and
///         `totalClaimed` <= `balance` always; what the payer may still take back is
///         `balance - totalClaimed`. Per receiver and token: `totalSettled` <= `totalClaimed`.
///         The contract holds, per token, the sum of its channels' balances less what was settled.

/// Pulls a deposit from its payer into the settlement contract (which checks its balance after).
interface IDepositCollector {
    function collect(address payer, address token, uint256 amount, bytes32 channelId, bytes calldata collectorData)
        external;
}

interface IERC20Minimal {
    function balanceOf(address owner) external view returns (uint256);
    function transfer(address to, uint256 value) external returns (bool);
}

contract X402BatchSettlement {
    struct ChannelConfig {
        address payer;
        address payerAuthorizer;
        address receiver;
        address receiverAuthorizer;
        address token;
        uint40 withdrawDelay;
        bytes32 salt;
    }

    struct Voucher {
        ChannelConfig channel;
        uint128 maxClaimableAmount;
    }

    /// One row of a claim: the payer's voucher and the cumulative total the receiver side claims
    /// under it (at most its ceiling).
    struct VoucherClaim {
        Voucher voucher;
        bytes signature;
        uint128 totalClaimed;
    }

    struct Channel {
        uint128 balance;
        uint128 totalClaimed;
    }

    struct Withdrawal {
        uint128 amount;
        uint40 initiatedAt;
    }

    struct Receiver {
        uint128 totalClaimed;
        uint128 totalSettled;
    }

    uint40 public constant MIN_WITHDRAW_DELAY = 15 minutes;
    uint40 public constant MAX_WITHDRAW_DELAY = 30 days;

    bytes32 public constant CHANNEL_CONFIG_TYPEHASH = keccak256(
        "ChannelConfig(address payer,address payerAuthorizer,address receiver,address receiverAuthorizer,address token,uint40 withdrawDelay,bytes32 salt)"
    );
    bytes32 public constant VOUCHER_TYPEHASH = keccak256("Voucher(bytes32 channelId,uint128 maxClaimableAmount)");
    bytes32 public constant REFUND_TYPEHASH = keccak256("Refund(bytes32 channelId,uint256 nonce,uint128 amount)");
    bytes32 public constant CLAIM_ENTRY_TYPEHASH =
        keccak256("ClaimEntry(bytes32 channelId,uint128 maxClaimableAmount,uint128 totalClaimed)");
    bytes32 public constant CLAIM_BATCH_TYPEHASH = keccak256(
        "ClaimBatch(ClaimEntry[] claims)ClaimEntry(bytes32 channelId,uint128 maxClaimableAmount,uint128 totalClaimed)"
    );
    bytes32 private constant DOMAIN_TYPEHASH =
        keccak256("EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)");
    bytes32 private constant DOMAIN_NAME = keccak256("x402 Batch Settlement");
    bytes32 private constant DOMAIN_VERSION = keccak256("1");

    mapping(bytes32 channelId => Channel) public channels;
    mapping(bytes32 channelId => Withdrawal) public pendingWithdrawals;
    mapping(bytes32 channelId => uint256) public refundNonce;
    mapping(address receiver => mapping(address token => Receiver)) public receivers;

    /// One state-changing call at a time (transient: nothing to initialise when the code is placed).
    bool private transient entered;

    event ChannelCreated(bytes32 indexed channelId, ChannelConfig config);
    event ChannelClosed(bytes32 indexed channelId, ChannelConfig config);
    event Deposited(bytes32 indexed channelId, address indexed payer, address indexed sender, uint128 amount, uint128 balance);
    event Claimed(bytes32 indexed channelId, address indexed receiver, address indexed sender, uint128 amount, uint128 totalClaimed);
    event Settled(address indexed receiver, address indexed token, address indexed sender, uint128 amount);
    event Refunded(bytes32 indexed channelId, address indexed payer, uint256 nonce, uint128 amount);
    event WithdrawInitiated(bytes32 indexed channelId, address indexed payer, uint128 amount, uint40 finalizableAt);
    event WithdrawFinalized(bytes32 indexed channelId, address indexed payer, uint128 amount);

    error Reentrancy();
    error InvalidChannelConfig();
    error WithdrawDelayOutOfRange();
    error ZeroAmount();
    error DepositNotReceived();
    error DepositTooLarge();
    error EmptyBatch();
    error AuthorizerMismatch();
    error NotReceiverSide();
    error NotPayerSide();
    error InvalidAuthorizerSignature();
    error InvalidVoucherSignature();
    error ClaimAboveVoucher();
    error ClaimExceedsBalance();
    error InvalidRefundNonce();
    error WithdrawalPending();
    error NoWithdrawalPending();
    error WithdrawalTooEarly();
    error WithdrawExceedsAvailable();
    error TransferFailed();

    modifier nonReentrant() {
        if (entered) revert Reentrancy();
        entered = true;
        _;
        entered = false;
    }

    // ----------------------------------------------------------------------------- identities

    function domainSeparator() public view returns (bytes32) {
        return keccak256(abi.encode(DOMAIN_TYPEHASH, DOMAIN_NAME, DOMAIN_VERSION, block.chainid, address(this)));
    }

    function _typedDigest(bytes32 structHash) private view returns (bytes32) {
        return keccak256(abi.encodePacked("\x19\x01", domainSeparator(), structHash));
    }

    /// The channel's id: the EIP-712 hash of its configuration, bound to this chain and contract.
    function getChannelId(ChannelConfig calldata config) public view returns (bytes32) {
        return _typedDigest(
            keccak256(
                abi.encode(
                    CHANNEL_CONFIG_TYPEHASH,
                    config.payer,
                    config.payerAuthorizer,
                    config.receiver,
                    config.receiverAuthorizer,
                    config.token,
                    config.withdrawDelay,
                    config.salt
                )
            )
        );
    }

    function getVoucherDigest(bytes32 channelId, uint128 maxClaimableAmount) public view returns (bytes32) {
        return _typedDigest(keccak256(abi.encode(VOUCHER_TYPEHASH, channelId, maxClaimableAmount)));
    }

    function getRefundDigest(bytes32 channelId, uint256 nonce, uint128 amount) public view returns (bytes32) {
        return _typedDigest(keccak256(abi.encode(REFUND_TYPEHASH, channelId, nonce, amount)));
    }

    /// What the receiver authorizer signs to let anyone submit a batch of claims.
    function getClaimBatchDigest(VoucherClaim[] calldata voucherClaims) public view returns (bytes32) {
        bytes32[] memory entries = new bytes32[](voucherClaims.length);
        for (uint256 i = 0; i < voucherClaims.length; i++) {
            VoucherClaim calldata row = voucherClaims[i];
            entries[i] = keccak256(
                abi.encode(
                    CLAIM_ENTRY_TYPEHASH, getChannelId(row.voucher.channel), row.voucher.maxClaimableAmount, row.totalClaimed
                )
            );
        }
        return _typedDigest(keccak256(abi.encode(CLAIM_BATCH_TYPEHASH, keccak256(abi.encodePacked(entries)))));
    }

    function _checkConfig(ChannelConfig calldata config) private pure {
        if (
            config.payer == address(0) || config.receiver == address(0) || config.receiverAuthorizer == address(0)
                || config.token == address(0)
        ) revert InvalidChannelConfig();
        if (config.withdrawDelay < MIN_WITHDRAW_DELAY || config.withdrawDelay > MAX_WITHDRAW_DELAY) {
            revert WithdrawDelayOutOfRange();
        }
    }

    // ----------------------------------------------------------------------------- deposits

    /// Adds `amount` to the channel, pulled from its payer by `collector` (which must send it here;
    /// what arrived is checked against this contract's balance, not taken on the collector's word).
    function deposit(ChannelConfig calldata config, uint128 amount, address collector, bytes calldata collectorData)
        external
        nonReentrant
    {
        _checkConfig(config);
        if (amount == 0) revert ZeroAmount();
        bytes32 channelId = getChannelId(config);
        Channel storage channel = channels[channelId];
        if (uint256(channel.balance) + amount > type(uint128).max) revert DepositTooLarge();

        IERC20Minimal token = IERC20Minimal(config.token);
        uint256 before = token.balanceOf(address(this));
        IDepositCollector(collector).collect(config.payer, config.token, amount, channelId, collectorData);
        if (token.balanceOf(address(this)) != before + amount) revert DepositNotReceived();

        bool opening = channel.balance == 0 && channel.totalClaimed == 0;
        channel.balance += amount;
        if (opening) emit ChannelCreated(channelId, config);
        emit Deposited(channelId, config.payer, msg.sender, amount, channel.balance);
    }

    // ----------------------------------------------------------------------------- claims

    /// Claims vouchers, sent by each row's receiver or receiver authorizer.
    function claim(VoucherClaim[] calldata voucherClaims) external nonReentrant {
        if (voucherClaims.length == 0) revert EmptyBatch();
        for (uint256 i = 0; i < voucherClaims.length; i++) {
            ChannelConfig calldata config = voucherClaims[i].voucher.channel;
            if (msg.sender != config.receiver && msg.sender != config.receiverAuthorizer) revert NotReceiverSide();
            _claim(voucherClaims[i]);
        }
    }

    /// Claims vouchers sent by anyone, under one signature of the rows' common receiver authorizer.
    function claimWithSignature(VoucherClaim[] calldata voucherClaims, bytes calldata authorizerSignature)
        external
        nonReentrant
    {
        if (voucherClaims.length == 0) revert EmptyBatch();
        address authorizer = voucherClaims[0].voucher.channel.receiverAuthorizer;
        for (uint256 i = 1; i < voucherClaims.length; i++) {
            if (voucherClaims[i].voucher.channel.receiverAuthorizer != authorizer) revert AuthorizerMismatch();
        }
        if (!Signatures.valid(authorizer, getClaimBatchDigest(voucherClaims), authorizerSignature)) {
            revert InvalidAuthorizerSignature();
        }
        for (uint256 i = 0; i < voucherClaims.length; i++) {
            _claim(voucherClaims[i]);
        }
    }

    /// Raises the channel's claimed total to the row's, within the voucher's ceiling and the
    /// channel's balance. A row at or below what is claimed already changes nothing, so a claim
    /// sent twice (a relayer's retry, a replayed batch) counts once.
    function _claim(VoucherClaim calldata row) private {
        ChannelConfig calldata config = row.voucher.channel;
        bytes32 channelId = getChannelId(config);
        uint128 ceiling = row.voucher.maxClaimableAmount;
        if (row.totalClaimed > ceiling) revert ClaimAboveVoucher();

        bytes32 digest = getVoucherDigest(channelId, ceiling);
        bool signed = config.payerAuthorizer != address(0)
            ? Signatures.recover(digest, row.signature) == config.payerAuthorizer
            : Signatures.valid(config.payer, digest, row.signature);
        if (!signed) revert InvalidVoucherSignature();

        Channel storage channel = channels[channelId];
        if (row.totalClaimed <= channel.totalClaimed) return;
        if (row.totalClaimed > channel.balance) revert ClaimExceedsBalance();
        uint128 added = row.totalClaimed - channel.totalClaimed;
        channel.totalClaimed = row.totalClaimed;
        receivers[config.receiver][config.token].totalClaimed += added;
        emit Claimed(channelId, config.receiver, msg.sender, added, row.totalClaimed);
    }

    // ----------------------------------------------------------------------------- settlement

    /// Sends a receiver everything it has claimed in `token` and not yet received. Anyone may call it.
    function settle(address receiver, address token) external nonReentrant {
        Receiver storage account = receivers[receiver][token];
        uint128 amount = account.totalClaimed - account.totalSettled;
        if (amount == 0) return;
        account.totalSettled = account.totalClaimed;
        _send(token, receiver, amount);
        emit Settled(receiver, token, msg.sender, amount);
    }

    // ----------------------------------------------------------------------------- refunds

    /// A cooperative refund, sent by the receiver or its authorizer.
    function refund(ChannelConfig calldata config, uint128 amount) external nonReentrant {
        if (msg.sender != config.receiver && msg.sender != config.receiverAuthorizer) revert NotReceiverSide();
        _refund(config, getChannelId(config), amount);
    }

    /// A cooperative refund sent by anyone, signed by the receiver authorizer for the channel's next nonce.
    function refundWithSignature(
        ChannelConfig calldata config,
        uint128 amount,
        uint256 nonce,
        bytes calldata receiverAuthorizerSignature
    ) external nonReentrant {
        bytes32 channelId = getChannelId(config);
        if (nonce != refundNonce[channelId]) revert InvalidRefundNonce();
        if (!Signatures.valid(config.receiverAuthorizer, getRefundDigest(channelId, nonce, amount), receiverAuthorizerSignature))
        {
            revert InvalidAuthorizerSignature();
        }
        _refund(config, channelId, amount);
    }

    /// Returns up to `amount` of the unclaimed escrow to the payer. The nonce advances first,
    /// whatever moves, so every refund signature is good for one refund only.
    function _refund(ChannelConfig calldata config, bytes32 channelId, uint128 amount) private {
        if (amount == 0) revert ZeroAmount();
        uint256 nonce = refundNonce[channelId]++;
        Channel storage channel = channels[channelId];
        uint128 available = channel.balance - channel.totalClaimed;
        uint128 returned = amount < available ? amount : available;
        if (returned == 0) return;
        channel.balance -= returned;

        Withdrawal storage pending = pendingWithdrawals[channelId];
        if (pending.amount > 0) {
            if (returned >= pending.amount) delete pendingWithdrawals[channelId];
            else pending.amount -= returned;
        }
        _send(config.token, config.payer, returned);
        emit Refunded(channelId, config.payer, nonce, returned);
        _closeIfEmpty(channelId, config);
    }

    // ----------------------------------------------------------------------------- withdrawals

    /// Starts a timed withdrawal of unclaimed escrow, sent by the payer or its authorizer.
    function initiateWithdraw(ChannelConfig calldata config, uint128 amount) external nonReentrant {
        _onlyPayerSide(config);
        if (amount == 0) revert ZeroAmount();
        bytes32 channelId = getChannelId(config);
        if (pendingWithdrawals[channelId].amount > 0) revert WithdrawalPending();
        Channel storage channel = channels[channelId];
        if (amount > channel.balance - channel.totalClaimed) revert WithdrawExceedsAvailable();
        pendingWithdrawals[channelId] = Withdrawal({amount: amount, initiatedAt: uint40(block.timestamp)});
        emit WithdrawInitiated(channelId, config.payer, amount, uint40(block.timestamp) + config.withdrawDelay);
    }

    /// Completes a withdrawal once its delay has passed: the payer gets what is still unclaimed of it.
    function finalizeWithdraw(ChannelConfig calldata config) external nonReentrant {
        _onlyPayerSide(config);
        bytes32 channelId = getChannelId(config);
        Withdrawal memory pending = pendingWithdrawals[channelId];
        if (pending.amount == 0) revert NoWithdrawalPending();
        if (block.timestamp < uint256(pending.initiatedAt) + config.withdrawDelay) revert WithdrawalTooEarly();
        delete pendingWithdrawals[channelId];

        Channel storage channel = channels[channelId];
        uint128 available = channel.balance - channel.totalClaimed;
        uint128 amount = pending.amount < available ? pending.amount : available;
        channel.balance -= amount;
        if (amount > 0) _send(config.token, config.payer, amount);
        emit WithdrawFinalized(channelId, config.payer, amount);
        _closeIfEmpty(channelId, config);
    }

    function _onlyPayerSide(ChannelConfig calldata config) private view {
        bool payerSide =
            msg.sender == config.payer || (config.payerAuthorizer != address(0) && msg.sender == config.payerAuthorizer);
        if (!payerSide) revert NotPayerSide();
    }

    // ----------------------------------------------------------------------------- helpers

    function _closeIfEmpty(bytes32 channelId, ChannelConfig calldata config) private {
        Channel storage channel = channels[channelId];
        if (channel.balance == 0 && channel.totalClaimed == 0) emit ChannelClosed(channelId, config);
    }

    function _send(address token, address to, uint256 amount) private {
        (bool ok, bytes memory answer) = token.call(abi.encodeCall(IERC20Minimal.transfer, (to, amount)));
        if (!ok || (answer.length > 0 && !abi.decode(answer, (bool)))) revert TransferFailed();
    }

    /// Several calls in one transaction (a claim and a refund, say), each as if sent alone.
    function multicall(bytes[] calldata data) external returns (bytes[] memory results) {
        results = new bytes[](data.length);
        for (uint256 i = 0; i < data.length; i++) {
            (bool ok, bytes memory answer) = address(this).delegatecall(data[i]);
            if (!ok) {
                assembly {
                    revert(add(answer, 32), mload(answer))
                }
            }
            results[i] = answer;
        }
    }
}

// The settlement contract's canonical address: collectors only take deposits it asks for.
address constant BATCH_SETTLEMENT = 0x4020074e9dF2ce1deE5A9C1b5c3f541D02a10003;

/// EIP-3009's receive form (the collector is the payee, so only it can submit the signature).
interface IERC3009Receive {
    function receiveWithAuthorization(
        address from,
        address to,
        uint256 value,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce,
        bytes calldata signature
    ) external;
}

/// Deposits signed as an EIP-3009 `ReceiveWithAuthorization` to this collector, whose nonce is
/// `keccak256(abi.encode(channelId, salt))`: the signature moves money into that channel only.
/// collectorData = abi.encode(uint256 validAfter, uint256 validBefore, uint256 salt, bytes signature).
contract ERC3009DepositCollector is IDepositCollector {
    error OnlySettlement();
    error TransferFailed();

    function collect(address payer, address token, uint256 amount, bytes32 channelId, bytes calldata collectorData)
        external
    {
        // Anyone else could replay a payer's signature with itself as the recipient.
        if (msg.sender != BATCH_SETTLEMENT) revert OnlySettlement();
        (uint256 validAfter, uint256 validBefore, uint256 salt, bytes memory signature) =
            abi.decode(collectorData, (uint256, uint256, uint256, bytes));
        bytes32 nonce = keccak256(abi.encode(channelId, salt));
        IERC3009Receive(token).receiveWithAuthorization(
            payer, address(this), amount, validAfter, validBefore, nonce, signature
        );
        (bool ok, bytes memory answer) = token.call(abi.encodeCall(IERC20Minimal.transfer, (msg.sender, amount)));
        if (!ok || (answer.length > 0 && !abi.decode(answer, (bool)))) revert TransferFailed();
    }
}

/// Deposits of any ERC-20 through Permit2: the payer signs a `PermitWitnessTransferFrom` for this
/// collector as spender, with the channel id as witness (`DepositWitness(bytes32 channelId)`), so
/// the signature moves money into that channel only. An optional EIP-2612 permit first lets
/// Permit2 spend the token (a failed one is ignored: the allowance may already be there).
/// collectorData = abi.encode(uint256 nonce, uint256 deadline, bytes signature, bytes eip2612Permit),
/// eip2612Permit empty or abi.encode(uint256 value, uint256 deadline, uint8 v, bytes32 r, bytes32 s).
contract Permit2DepositCollector is IDepositCollector {
    ISignatureTransfer public constant PERMIT2 = ISignatureTransfer(0x000000000022D473030F116dDEE9F6B43aC78BA3);
    bytes32 public constant DEPOSIT_WITNESS_TYPEHASH = keccak256("DepositWitness(bytes32 channelId)");
    string public constant WITNESS_TYPE_STRING =
        "DepositWitness witness)DepositWitness(bytes32 channelId)TokenPermissions(address token,uint256 amount)";

    error OnlySettlement();

    function collect(address payer, address token, uint256 amount, bytes32 channelId, bytes calldata collectorData)
        external
    {
        if (msg.sender != BATCH_SETTLEMENT) revert OnlySettlement();
        (uint256 nonce, uint256 deadline, bytes memory signature, bytes memory eip2612Permit) =
            abi.decode(collectorData, (uint256, uint256, bytes, bytes));
        if (eip2612Permit.length > 0) _permitPermit2(payer, token, eip2612Permit);
        PERMIT2.permitWitnessTransferFrom(
            ISignatureTransfer.PermitTransferFrom({
                permitted: ISignatureTransfer.TokenPermissions({token: token, amount: amount}),
                nonce: nonce,
                deadline: deadline
            }),
            ISignatureTransfer.SignatureTransferDetails({to: msg.sender, requestedAmount: amount}),
            payer,
            keccak256(abi.encode(DEPOSIT_WITNESS_TYPEHASH, channelId)),
            WITNESS_TYPE_STRING,
            signature
        );
    }

    function _permitPermit2(address payer, address token, bytes memory eip2612Permit) private {
        (uint256 value, uint256 deadline, uint8 v, bytes32 r, bytes32 s) =
            abi.decode(eip2612Permit, (uint256, uint256, uint8, bytes32, bytes32));
        try IERC20Permit(token).permit(payer, address(PERMIT2), value, deadline, v, r, s) {} catch {}
    }
}
