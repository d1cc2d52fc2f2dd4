//! One batch-settlement request ([`crate::batch`]): its channel bound to the seller's
//! requirement, its voucher checked (in process, or by the facilitator), the handler run, the
//! charge committed; a deposit settled first; a refund completed and settled.

use alloy_primitives::B256;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body::Body;
use serde_json::{Value, json};
use tollgate_encoding::batch::{self as wire, Unbound};
use tollgate_encoding::evm;
use tollgate_protocol::x402::batch::{
    BatchPayload, ChannelConfig, ChannelState, ClaimRow, ClaimVoucher, RefundPayload, Voucher, VoucherState,
};
use tollgate_protocol::x402::header::{self, PAYMENT_RESPONSE};
use tollgate_protocol::x402::{
    Asset, PaymentPayload, PaymentPayloadV2, PaymentRequirements, ResourceInfo, SettleResponse,
};
use tollgate_protocol::{Address, AtomicAmount, Network};
use tower::Service;

use crate::batch::{ChannelRecord, ChannelStoreError, Channels, envelope, reason};
use crate::body::{BoxError, PaymentBody};
use crate::challenge;
use crate::config::Config;
use crate::facilitator::{BatchAnswer, BatchCall, Payment, Verdict};
use crate::price::Offer;

/// What the seller's requirement binds a channel to.
struct Terms<'a> {
    requirement: &'a PaymentRequirements,
    channel: wire::Terms,
}

impl<'a> Terms<'a> {
    fn of(requirement: &'a PaymentRequirements) -> Option<Self> {
        let Network::Eip155(chain_id) = requirement.network else { return None };
        let Asset::Token(token) = &requirement.asset else { return None };
        let extra = requirement.extra.as_ref()?;
        // The seller's own requirement: read as hex, its checksum not checked again.
        let authorizer: alloy_primitives::Address = extra.get("receiverAuthorizer")?.as_str()?.parse().ok()?;
        let channel = wire::Terms {
            chain_id,
            token: evm::address(token)?,
            receiver: evm::address(&requirement.pay_to)?,
            receiver_authorizer: authorizer,
            withdraw_delay: extra.get("withdrawDelay")?.as_u64()?,
        };
        Some(Self { requirement, channel })
    }

    /// The channel's id when `config` is a channel of this requirement and `voucher` names it;
    /// else the reason code.
    fn bind(&self, config: &ChannelConfig, voucher: &Voucher) -> Result<B256, &'static str> {
        match self.channel.bind(config, &voucher.channel_id) {
            Ok((_, id)) => Ok(id),
            Err(Unbound::Token) => Err(reason::TOKEN_MISMATCH),
            Err(Unbound::Receiver) => Err(reason::RECEIVER_MISMATCH),
            Err(Unbound::ReceiverAuthorizer) => Err(reason::AUTHORIZER_MISMATCH),
            Err(Unbound::WithdrawDelay) => Err(reason::DELAY_MISMATCH),
            Err(Unbound::ChannelId) => Err(reason::CHANNEL_ID_MISMATCH),
            Err(Unbound::Malformed(_) | Unbound::ZeroPayer) => Err(reason::PAYLOAD_TYPE),
        }
    }
}

/// Whether the channel's payer authorizer (an EOA) signed `voucher`. A zero payer authorizer
/// (the payer signs, possibly as a contract) is left to the facilitator: `None`.
fn signed(terms: &Terms<'_>, config: &ChannelConfig, id: B256, voucher: &Voucher) -> Option<bool> {
    let authorizer = evm::address(&config.payer_authorizer)?;
    if authorizer.is_zero() {
        return None;
    }
    let bytes = alloy_primitives::hex::decode(&voucher.signature).ok()?;
    let digest = wire::voucher_digest(terms.channel.chain_id, id, voucher.max_claimable_amount.get());
    Some(evm::recover_signer(&digest, &bytes) == Some(authorizer))
}

fn now_secs() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// The answers of one batch request.
struct Answers<'a> {
    config: &'a Config,
    resource: &'a ResourceInfo,
    offers: &'a [Offer],
    offer: usize,
    headers: &'a http::HeaderMap,
}

impl Answers<'_> {
    /// A 402 refusal saying `why`, with the failed settlement header.
    fn refused(&self, why: &str) -> Response<PaymentBody> {
        self.challenge(why, self.offers.to_vec(), true)
    }

    /// A 402 for `offers`; `failed` adds the failed settlement header (a corrective answer has
    /// none: buyers take a settlement header on a 402 as final).
    fn challenge(&self, why: &str, offers: Vec<Offer>, failed: bool) -> Response<PaymentBody> {
        let extensions = crate::pass::extensions(self.config, &self.resource.url, &offers);
        let mut out = challenge::payment_required(why, self.resource, &offers, &extensions, self.headers);
        let network = &self.offers[self.offer].0.network;
        if failed && let Some(value) = challenge::failure_header(why, network, false) {
            out.headers.insert(PAYMENT_RESPONSE, value);
        }
        out.into_response()
    }

    /// The corrective 402: the channel as this seller holds it, for the buyer to resync.
    fn corrective(
        &self,
        channel: &ChannelState,
        charged: AtomicAmount,
        voucher: Option<&VoucherState>,
    ) -> Response<PaymentBody> {
        let mut offers = self.offers.to_vec();
        let (requirement, _) = &mut offers[self.offer];
        let mut extra = requirement.extra.take().and_then(|e| e.as_object().cloned()).unwrap_or_default();
        let state = ChannelState { charged_cumulative_amount: Some(charged), ..channel.clone() };
        extra.insert("channelState".into(), serde_json::to_value(state).unwrap_or_default());
        if let Some(voucher) = voucher {
            extra.insert("voucherState".into(), serde_json::to_value(voucher).unwrap_or_default());
        }
        requirement.extra = Some(Value::Object(extra));
        self.challenge(reason::CUMULATIVE_MISMATCH, offers, false)
    }

    fn unavailable(&self, verdict: Verdict) -> Response<PaymentBody> {
        match verdict {
            Verdict::Pending { payment_id, transaction } => {
                challenge::pending(payment_id.as_deref(), transaction.as_deref(), self.config.retry_after_secs)
                    .into_response()
            }
            Verdict::Unavailable { timed_out, reason } => {
                tracing::warn!(%reason, "payment facilitator unavailable");
                challenge::unavailable(timed_out).into_response()
            }
            Verdict::Refused { reason } => self.refused(&reason),
            Verdict::Paid(_) => challenge::unavailable(false).into_response(),
        }
    }

    fn store_failed(&self, e: &ChannelStoreError) -> Response<PaymentBody> {
        tracing::error!(error = %e, "batch-settlement channel state unavailable");
        let mut out = self.refused(reason::STATE_UNAVAILABLE);
        *out.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
        out
    }
}

/// The `PAYMENT-RESPONSE` of a served (or refunded) batch request: what it charged, and the
/// channel with the seller's count (what buyers keep their count by).
fn settlement_header(
    network: &Network,
    payer: &Address,
    transaction: Option<&str>,
    charged: Option<AtomicAmount>,
    state: &ChannelState,
) -> Option<http::HeaderValue> {
    let mut extra = json!({ "channelState": state });
    if let Some(charged) = charged {
        extra["chargedAmount"] = json!(charged);
    }
    let response = SettleResponse {
        success: true,
        error_reason: None,
        error_message: None,
        payer: Some(payer.to_string()),
        transaction: transaction.unwrap_or_default().to_owned(),
        network: network.to_string(),
        amount: charged,
        payment_id: None,
        answers: None,
        extra: Some(extra),
    };
    http::HeaderValue::from_str(&header::encode(&response).ok()?).ok()
}

/// The facilitator's word on the channel (`extra`, or `extra.channelState`).
fn reported_state(answer: &BatchAnswer) -> Option<ChannelState> {
    let extra = answer.extra.as_ref()?;
    let value = extra.get("channelState").unwrap_or(extra);
    serde_json::from_value(value.clone()).ok()
}

/// A batch payment for `offers[offer]`: served and charged, refunded, or refused.
pub(crate) async fn handle<S, ReqBody, ResBody>(
    config: &Config,
    inner: S,
    request: Request<ReqBody>,
    payload: &PaymentPayload,
    (offers, offer): (&[Offer], usize),
    resource: &ResourceInfo,
) -> Result<Response<PaymentBody>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Send,
    S::Future: Send,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    let headers = request.headers().clone();
    let answers = Answers { config, resource, offers, offer, headers: &headers };
    let requirement = &offers[offer].0;
    let Some(channels) = config.channels.as_deref() else {
        return Ok(answers.refused("this layer keeps no payment channels"));
    };
    let PaymentPayload::V2(envelope) = payload else {
        return Ok(answers.refused("batch-settlement is paid in x402 v2 (PAYMENT-SIGNATURE)"));
    };
    let Some(terms) = Terms::of(requirement) else {
        return Ok(answers.refused("this requirement names no receiver authorizer or withdrawal delay"));
    };
    let parsed = match BatchPayload::from_value(&envelope.payload) {
        Ok(parsed) => parsed,
        Err(e) => return Ok(answers.refused(&format!("{}: {e}", reason::PAYLOAD_TYPE))),
    };
    let Some((channel_config, voucher)) = parsed.channel() else {
        return Ok(answers.refused(&format!("{}: claims and sweeps are the seller's to send", reason::PAYLOAD_TYPE)));
    };
    let id = match terms.bind(channel_config, voucher) {
        Ok(id) => id,
        Err(why) => return Ok(answers.refused(why)),
    };
    let channel_id = format!("{id:#x}");
    let claimer = channels.claimer(&config.facilitator, &config.tasks);
    let held = channels.lock(&channel_id).await;
    let step = Step { channels, claimer, terms: &terms, answers: &answers, channel_id: &channel_id, id, envelope };
    let answer = match &parsed {
        BatchPayload::Refund(refund) => step.refund(refund).await,
        _ => step.serve(inner, request, &parsed, (channel_config, voucher)).await?,
    };
    drop(held);
    Ok(answer)
}

/// One batch request on a channel whose lock is held.
struct Step<'a> {
    channels: &'a Channels,
    claimer: &'a crate::batch::claims::Handle,
    terms: &'a Terms<'a>,
    answers: &'a Answers<'a>,
    channel_id: &'a str,
    id: B256,
    envelope: &'a PaymentPayloadV2,
}

/// What the layer reads of a channel before it serves: the chain state, and when it was read.
struct Checked {
    chain: ChannelState,
    synced_at: u64,
}

impl Step<'_> {
    fn requirement(&self) -> &PaymentRequirements {
        self.terms.requirement
    }

    /// Asks the facilitator (`/verify`, or `/settle`) about the buyer's payload, as paying the
    /// resource this layer names (never the one the buyer's payload says).
    async fn ask(&self, settle: bool) -> Result<BatchAnswer, Verdict> {
        let payload = PaymentPayloadV2 { resource: Some(self.answers.resource.clone()), ..self.envelope.clone() };
        let call = BatchCall { settle, payload: &payload, requirement: self.requirement() };
        self.answers.config.facilitator.batch(call).await
    }

    /// The chain state the payload is checked against, from the facilitator's `/verify`; else
    /// the answer (a refusal, corrective where the buyer may resync).
    async fn verified(&self, record: Option<&ChannelRecord>) -> Result<Checked, Response<PaymentBody>> {
        let answer = self.ask(false).await.map_err(|v| self.answers.unavailable(v))?;
        if !answer.ok {
            let why = answer.reason.unwrap_or_else(|| "invalid payment".into());
            // Below what is claimed: the buyer's count is behind the seller's.
            if why.starts_with(reason::BELOW_CLAIMED)
                && let Some(record) = record
            {
                return Err(self.answers.corrective(&record.chain, record.charged, record.voucher.as_ref()));
            }
            return Err(self.answers.refused(&why));
        }
        let chain = reported_state(&answer)
            .or_else(|| record.map(|r| r.chain.clone()))
            .ok_or_else(|| self.answers.refused(reason::STATE_UNAVAILABLE))?;
        Ok(Checked { chain, synced_at: now_secs() })
    }

    /// A deposit or a voucher: checked (and a deposit settled), served, charged.
    async fn serve<S, ReqBody, ResBody>(
        &self,
        inner: S,
        request: Request<ReqBody>,
        parsed: &BatchPayload,
        (channel, voucher): (&ChannelConfig, &Voucher),
    ) -> Result<Response<PaymentBody>, S::Error>
    where
        S: Service<Request<ReqBody>, Response = Response<ResBody>> + Send,
        S::Future: Send,
        ResBody: Body<Data = Bytes> + Send + 'static,
        ResBody::Error: Into<BoxError>,
    {
        let answers = self.answers;
        let store = &self.channels.store;
        let record = match store.get(self.channel_id).await {
            Ok(record) => record,
            Err(e) => return Ok(answers.store_failed(&e)),
        };
        // A refund under way (on any instance) claims what it read: nothing more is served.
        if record.as_ref().is_some_and(|r| r.refunding(now_secs())) {
            return Ok(answers.refused(reason::CHANNEL_BUSY));
        }
        let price = self.requirement().amount;
        let deposit = matches!(parsed, BatchPayload::Deposit(_));
        let max = voucher.max_claimable_amount;
        // The next voucher is exactly what was charged plus this price.
        if let Some(r) = &record
            && max.get() != r.charged.get().saturating_add(price.get())
        {
            return Ok(answers.corrective(&r.chain, r.charged, r.voucher.as_ref()));
        }
        let (checked, transaction) = if deposit {
            // Settled before anything is served (the facilitator checks it, and answers a
            // deposit sent again with the one it made), and kept whatever the handler does.
            let settled = match self.ask(true).await {
                Ok(a) if a.ok => a,
                Ok(a) => return Ok(answers.refused(a.reason.as_deref().unwrap_or("deposit refused"))),
                Err(verdict) => return Ok(answers.unavailable(verdict)),
            };
            let Some(chain) = reported_state(&settled).or_else(|| record.as_ref().map(|r| r.chain.clone())) else {
                return Ok(answers.refused(reason::STATE_UNAVAILABLE));
            };
            (Checked { chain, synced_at: now_secs() }, settled.transaction)
        } else {
            // Checked here while the chain state is fresh and the voucher signer is an EOA;
            // else by the facilitator, which reads the chain. A channel whose payer started a
            // withdrawal is always read again: once it completes, what is left is only what was
            // claimed, and a voucher above it could never be.
            // So is one whose refund was started and not seen through (the chain says whether
            // it landed).
            let fresh = record.as_ref().filter(|r| {
                r.chain.withdraw_requested_at == 0
                    && r.refunding_since == 0
                    && now_secs().saturating_sub(r.synced_at) <= self.channels.policy.state_ttl.as_secs()
            });
            match fresh.and_then(|r| signed(self.terms, channel, self.id, voucher).map(|ok| (ok, r))) {
                Some((false, _)) => return Ok(answers.refused(reason::VOUCHER_SIGNATURE)),
                Some((true, r)) => (Checked { chain: r.chain.clone(), synced_at: r.synced_at }, None),
                None => match self.verified(record.as_ref()).await {
                    Ok(checked) => (checked, None),
                    Err(answer) => return Ok(answer),
                },
            }
        };
        let base = record.as_ref().map_or(checked.chain.total_claimed, |r| r.charged);
        let mut next = ChannelRecord {
            channel_id: self.channel_id.to_owned(),
            config: channel.clone(),
            requirement: self.requirement().clone(),
            charged: base,
            voucher: record.as_ref().and_then(|r| r.voucher.clone()),
            chain: checked.chain,
            synced_at: checked.synced_at,
            refunding_since: 0,
            version: 0,
        };
        let mut version = record.as_ref().map(|r| r.version);
        if deposit {
            match store.put(&next, version).await {
                Ok(true) => version = Some(version.map_or(1, |v| v + 1)),
                Ok(false) => return Ok(answers.refused(reason::CHANNEL_BUSY)),
                Err(e) => return Ok(answers.store_failed(&e)),
            }
        }
        if record.is_none() && max.get() != base.get().saturating_add(price.get()) {
            return Ok(answers.corrective(&next.chain, base, None));
        }
        if max > next.chain.balance {
            return Ok(answers.refused(reason::EXCEEDS_BALANCE));
        }
        if max <= next.chain.total_claimed {
            return Ok(answers.corrective(&next.chain, base, next.voucher.as_ref()));
        }
        let payer = channel.payer;
        let network = self.requirement().network.clone();
        let payment = Payment::new(network.clone(), self.requirement().asset, price, self.requirement().pay_to)
            .with_payer(payer.to_string());
        let payment = match &transaction {
            Some(tx) => payment.with_transaction(tx.clone()),
            None => payment,
        };
        let Some((mut buffered, charge)) =
            crate::handler::run_buffered(answers.config, inner, request, payment).await?
        else {
            return Ok(challenge::unread(true).into_response());
        };
        let charged = if buffered.status.as_u16() >= 400 {
            AtomicAmount::ZERO
        } else {
            charge.map_or(price, |c| c.capped(price))
        };
        if charged.get() > 0 {
            next.charged = AtomicAmount(base.get() + charged.get());
            next.voucher = Some(VoucherState { signed_max_claimable: max, signature: voucher.signature.clone() });
            match store.put(&next, version).await {
                Ok(true) => {}
                // Another request or instance moved the channel first: this answer is withheld.
                Ok(false) => return Ok(answers.refused(reason::CHANNEL_BUSY)),
                Err(e) => return Ok(answers.store_failed(&e)),
            }
        }
        if self.channels.policy.urgent(&next) {
            self.claimer.nudge();
        }
        // A failed handler's answer tells a depositing buyer its deposit landed, and charges nothing.
        if charged.get() > 0 || deposit {
            let state = ChannelState { charged_cumulative_amount: Some(next.charged), ..next.chain.clone() };
            if let Some(value) =
                settlement_header(&self.requirement().network, &payer, transaction.as_deref(), Some(charged), &state)
            {
                buffered.headers.insert(PAYMENT_RESPONSE, value);
            }
        }
        challenge::make_private(&mut buffered.headers);
        Ok(buffered.into_response())
    }

    /// A cooperative refund: what was charged is claimed and the rest (or the amount asked)
    /// returned, in one facilitator settlement; nothing is served.
    async fn refund(&self, refund: &RefundPayload) -> Response<PaymentBody> {
        let answers = self.answers;
        let store = &self.channels.store;
        let record = match store.get(self.channel_id).await {
            Ok(Some(record)) => record,
            Ok(None) => return answers.refused(reason::MISSING_CHANNEL),
            Err(e) => return answers.store_failed(&e),
        };
        let now = now_secs();
        if record.refunding(now) {
            return answers.refused(reason::CHANNEL_BUSY);
        }
        // A refund's voucher is the charge itself: the payer agrees to what was served.
        if refund.voucher.max_claimable_amount != record.charged {
            return answers.corrective(&record.chain, record.charged, record.voucher.as_ref());
        }
        let checked = match self.verified(Some(&record)).await {
            Ok(checked) => checked,
            Err(answer) => return answer,
        };
        let remainder = checked.chain.balance.get().saturating_sub(record.charged.get());
        if remainder == 0 {
            return answers.refused(reason::REFUND_NO_BALANCE);
        }
        let amount = refund.amount.map_or(remainder, AtomicAmount::get);
        if amount == 0 || amount > remainder {
            return answers.refused(reason::REFUND_AMOUNT_INVALID);
        }
        let completed = RefundPayload {
            amount: Some(AtomicAmount(amount)),
            refund_nonce: Some(checked.chain.refund_nonce),
            claims: Some(vec![ClaimRow {
                voucher: ClaimVoucher { channel: record.config.clone(), max_claimable_amount: record.charged },
                signature: refund.voucher.signature.clone(),
                total_claimed: record.charged,
            }]),
            refund_authorizer_signature: None,
            claim_authorizer_signature: None,
            ..refund.clone()
        };
        // Closed on every instance sharing the store before the facilitator is asked: a voucher
        // charged after the charge read here would be above what the refund leaves claimable.
        let closed = ChannelRecord { refunding_since: now.max(1), ..record.clone() };
        match store.put(&closed, Some(record.version)).await {
            Ok(true) => {}
            Ok(false) => return answers.refused(reason::CHANNEL_BUSY),
            Err(e) => return answers.store_failed(&e),
        }
        let version = record.version + 1;
        let payload = envelope(self.requirement(), serde_json::to_value(&completed).unwrap_or_default());
        let call = BatchCall { settle: true, payload: &payload, requirement: self.requirement() };
        let asked = answers.config.facilitator.batch(call).await;
        let settled = match asked {
            Ok(a) if a.ok => a,
            refused_or_failed => {
                // Not refunded: the channel opens again. (Were this write lost, the window
                // closes it for a while, then the chain is read again.)
                let reopened = ChannelRecord { refunding_since: 0, ..record.clone() };
                if let Err(e) = store.put(&reopened, Some(version)).await {
                    tracing::warn!(error = %e, channel = self.channel_id, "a channel whose refund failed stays closed until its window ends");
                }
                return match refused_or_failed {
                    Ok(a) => answers.refused(a.reason.as_deref().unwrap_or("refund refused")),
                    Err(verdict) => answers.unavailable(verdict),
                };
            }
        };
        // The refund's transaction claimed the charges: they are swept now, through this
        // layer's facilitator.
        let (facilitator, requirement) = (answers.config.facilitator.clone(), self.requirement().clone());
        answers.config.tasks.spawn(async move { crate::batch::claims::sweep(&*facilitator, &requirement).await });
        let mut next = record.clone();
        next.chain = reported_state(&settled).unwrap_or(checked.chain);
        next.synced_at = now_secs();
        next.refunding_since = 0;
        if let Err(e) = store.put(&next, Some(version)).await {
            tracing::error!(error = %e, channel = self.channel_id, "a settled refund could not be recorded; the chain has it");
        }
        let state = ChannelState { charged_cumulative_amount: Some(record.charged), ..next.chain.clone() };
        let body =
            json!({ "message": "Refund acknowledged", "channelId": self.channel_id, "amount": amount.to_string() });
        let mut response = Response::new(PaymentBody::full(Bytes::from(body.to_string())));
        response.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
        response.headers_mut().insert(http::header::CACHE_CONTROL, http::HeaderValue::from_static("no-store"));
        let payer = record.config.payer;
        if let Some(value) =
            settlement_header(&self.requirement().network, &payer, settled.transaction.as_deref(), None, &state)
        {
            response.headers_mut().insert(PAYMENT_RESPONSE, value);
        }
        response
    }
}
