//! Plans: how many requests a key may make per minute, and which endpoints it may call.
//!
//! | plan | requests / minute | endpoint groups |
//! |---|---|---|
//! | standard | 100 | payment, transaction, verify, settle, supported, webhooks |
//! | premium | 1,000 | standard's + token, ws |
//! | enterprise | per key (default 10,000) | all |
//!
//! Both columns are configurable (`[plans.<name>]` in the config file), and so is each plan's
//! daily budget of network fees the facilitator pays for an account ([`Sponsorship`]: 0.01 SOL
//! and 0.005 ETH on standard, ten times that on premium, a hundred times on enterprise).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A key's plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Plan {
    /// 100 rpm, core endpoints.
    Standard,
    /// 1,000 rpm, plus token info and WebSocket.
    Premium,
    /// Custom rpm, everything.
    Enterprise,
}

impl Plan {
    /// Every plan.
    pub const ALL: [Self; 3] = [Self::Standard, Self::Premium, Self::Enterprise];

    /// The name used in config, CLI and storage.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Standard => "standard",
            Self::Premium => "premium",
            Self::Enterprise => "enterprise",
        }
    }
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Plan {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| format!("unknown plan {s:?}: expected standard, premium or enterprise"))
    }
}

/// Groups of endpoints that plans grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EndpointGroup {
    /// `/payment/*`.
    Payment,
    /// `/transaction/*`.
    Transaction,
    /// `POST /verify`.
    Verify,
    /// `POST /settle`.
    Settle,
    /// `GET /supported`.
    Supported,
    /// `GET /token/info/{mint}`.
    Token,
    /// `GET /ws`.
    Ws,
    /// `/webhooks*`.
    Webhooks,
    /// Every group.
    #[serde(rename = "*")]
    All,
}

/// Every authenticated endpoint, for access checks and rate limiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Endpoint {
    /// `POST /payment/send`.
    PaymentSend,
    /// `POST /payment/receive`.
    PaymentReceive,
    /// `POST /payment/answer/release`.
    PaymentAnswerRelease,
    /// `POST /passes/sign-in`.
    PassSignIn,
    /// `GET /payment/status/{paymentId}`.
    PaymentStatus,
    /// `GET /payment/history/{walletAddress}`.
    PaymentHistory,
    /// `POST /transaction/send`.
    TransactionSend,
    /// `POST /transaction/receive`.
    TransactionReceive,
    /// `POST /transaction/confirm`.
    TransactionConfirm,
    /// `GET /token/info/{mint}`.
    TokenInfo,
    /// `POST /verify`.
    Verify,
    /// `POST /settle`.
    Settle,
    /// `GET /supported`.
    Supported,
    /// `GET /ws`.
    Ws,
    /// `POST /dev/airdrop` (embedded development ledger only).
    DevAirdrop,
    /// `/webhooks*`: register, list, delete endpoints; read their delivery log.
    Webhooks,
    /// `GET /discovery/resources` and `/discovery/search`, when `[discovery] public = false`
    /// (granted with `/supported`).
    Discovery,
    /// `/discovery/own*`: a seller's own catalog entries (granted with `/settle`).
    DiscoveryOwn,
}

impl Endpoint {
    /// The group a plan grants it through.
    #[must_use]
    pub const fn group(self) -> EndpointGroup {
        match self {
            Self::PaymentSend
            | Self::PaymentReceive
            | Self::PaymentAnswerRelease
            | Self::PassSignIn
            | Self::PaymentStatus
            | Self::PaymentHistory
            | Self::DevAirdrop => EndpointGroup::Payment,
            Self::TransactionSend | Self::TransactionReceive | Self::TransactionConfirm => EndpointGroup::Transaction,
            Self::TokenInfo => EndpointGroup::Token,
            Self::Verify => EndpointGroup::Verify,
            Self::Settle => EndpointGroup::Settle,
            Self::Supported | Self::Discovery => EndpointGroup::Supported,
            Self::DiscoveryOwn => EndpointGroup::Settle,
            Self::Ws => EndpointGroup::Ws,
            Self::Webhooks => EndpointGroup::Webhooks,
        }
    }
}

/// One plan's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanConfig {
    /// Requests per minute (per key). For enterprise, the default when a key has no own limit.
    pub rpm: u32,
    /// Endpoint groups granted.
    pub endpoints: Vec<EndpointGroup>,
    /// Network fees the facilitator pays for an account's settlements per UTC day.
    pub sponsorship: Sponsorship,
}

/// The most network fees the facilitator pays per UTC day for one account's settlements (x402
/// `exact`: the Solana fee payer's fees, the EVM settling account's gas), per chain family, in
/// native base units. Each settlement counts the most it can cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sponsorship {
    /// Lamports a day, over every Solana network.
    pub lamports_per_day: u64,
    /// Wei a day, over every EVM network.
    pub wei_per_day: u64,
}

impl Sponsorship {
    /// The budget for `family`, base units a day.
    #[must_use]
    pub const fn per_day(&self, family: tollgate_protocol::ChainFamily) -> u64 {
        match family {
            tollgate_protocol::ChainFamily::Solana => self.lamports_per_day,
            tollgate_protocol::ChainFamily::Evm => self.wei_per_day,
        }
    }
}

impl PlanConfig {
    /// Whether the plan grants the endpoint.
    #[must_use]
    pub fn allows(&self, endpoint: Endpoint) -> bool {
        self.endpoints.iter().any(|g| *g == EndpointGroup::All || *g == endpoint.group())
    }
}

/// All plans' settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plans {
    standard: PlanConfig,
    premium: PlanConfig,
    enterprise: PlanConfig,
}

impl Default for Plans {
    fn default() -> Self {
        use EndpointGroup as G;
        let standard = vec![G::Payment, G::Transaction, G::Verify, G::Settle, G::Supported, G::Webhooks];
        let mut premium = standard.clone();
        premium.extend([G::Token, G::Ws]);
        // 0.01 SOL is 2,000 signatures at 5,000 lamports; 0.005 ETH is 100 settlements of 50,000
        // gas at 1 gwei. Ten and a hundred times that for the larger plans.
        let sponsored = |times: u64| Sponsorship {
            lamports_per_day: 10_000_000 * times,
            wei_per_day: 5_000_000_000_000_000 * times,
        };
        Self {
            standard: PlanConfig { rpm: 100, endpoints: standard, sponsorship: sponsored(1) },
            premium: PlanConfig { rpm: 1_000, endpoints: premium, sponsorship: sponsored(10) },
            enterprise: PlanConfig { rpm: 10_000, endpoints: vec![G::All], sponsorship: sponsored(100) },
        }
    }
}

impl Plans {
    /// A plan's settings.
    #[must_use]
    pub const fn get(&self, plan: Plan) -> &PlanConfig {
        match plan {
            Plan::Standard => &self.standard,
            Plan::Premium => &self.premium,
            Plan::Enterprise => &self.enterprise,
        }
    }

    /// A plan's settings, to change.
    pub const fn get_mut(&mut self, plan: Plan) -> &mut PlanConfig {
        match plan {
            Plan::Standard => &mut self.standard,
            Plan::Premium => &mut self.premium,
            Plan::Enterprise => &mut self.enterprise,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_access_table() {
        let plans = Plans::default();
        let standard = plans.get(Plan::Standard);
        let premium = plans.get(Plan::Premium);
        let enterprise = plans.get(Plan::Enterprise);
        for e in [
            Endpoint::PaymentSend,
            Endpoint::PaymentAnswerRelease,
            Endpoint::PassSignIn,
            Endpoint::PaymentHistory,
            Endpoint::TransactionConfirm,
            Endpoint::Verify,
            Endpoint::Settle,
            Endpoint::Supported,
            Endpoint::Webhooks,
        ] {
            assert!(standard.allows(e) && premium.allows(e) && enterprise.allows(e), "{e:?}");
        }
        for e in [Endpoint::TokenInfo, Endpoint::Ws] {
            assert!(!standard.allows(e), "{e:?}");
            assert!(premium.allows(e) && enterprise.allows(e), "{e:?}");
        }
    }

    #[test]
    fn plan_names() {
        for p in Plan::ALL {
            assert_eq!(p.as_str().parse::<Plan>(), Ok(p));
        }
        assert!("gold".parse::<Plan>().is_err());
    }
}
