//! The ledger's JSON-RPC: the Solana methods Tollgate's daemon, its buyer crate and its tests
//! call, answered in the shapes a Solana node gives (the `solana-rpc-client` types serialize
//! them), plus `tollgate_setAccount` for development. Anything else is "method not found".

use std::sync::{Arc, Mutex};

use axum::Json;
use axum::extract::State;
use base64::Engine as _;
use serde_json::{Value, json};
use solana_rpc_client_api::custom_error;
use solana_rpc_client_api::response::{RpcBlockhash, RpcSimulateTransactionResult};
use solana_sdk::account::Account;
use solana_sdk::message::VersionedMessage;
use solana_sdk::pubkey::Pubkey;
use solana_sdk::signature::Signature;
use solana_sdk::transaction::{TransactionError, VersionedTransaction};
use solana_transaction_status_client_types::option_serializer::OptionSerializer;
use solana_transaction_status_client_types::{
    EncodedConfirmedTransactionWithStatusMeta, EncodedTransaction, EncodedTransactionWithStatusMeta,
    TransactionBinaryEncoding, TransactionConfirmationStatus, TransactionStatus, UiLoadedAddresses,
    UiTransactionStatusMeta, UiTransactionTokenBalance,
};

use super::ledger::{Execution, Holding, Landed, Ledger, Preflight};

/// The ledger as the server shares it.
pub type Shared = Arc<Mutex<Ledger>>;

/// A JSON-RPC error object.
#[derive(Debug)]
struct RpcError {
    code: i64,
    message: String,
    data: Option<Value>,
}

impl RpcError {
    fn invalid_params(message: impl Into<String>) -> Self {
        Self { code: -32602, message: message.into(), data: None }
    }

    fn stopped() -> Self {
        Self {
            code: custom_error::JSON_RPC_SERVER_ERROR_NODE_UNHEALTHY,
            message: "the embedded ledger stopped after an internal failure; restart it".into(),
            data: None,
        }
    }
}

/// The largest request body (a node's limit: 50 KiB), so that no one request holds the ledger
/// for long.
pub const MAX_REQUEST_BYTES: usize = 50 * 1024;
/// Most signatures one `getSignatureStatuses` asks about (a node's limit).
const MAX_STATUSES: usize = 256;

/// `POST /`: one JSON-RPC request or a batch of them.
pub async fn handle(State(ledger): State<Shared>, body: axum::body::Bytes) -> Json<Value> {
    Json(match serde_json::from_slice(&body) {
        Ok(request) => answer_all(&ledger, &request),
        Err(_) => json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "Parse error"}}),
    })
}

/// A request, or a batch answered in order.
fn answer_all(ledger: &Shared, body: &Value) -> Value {
    match body {
        Value::Array(requests) => Value::Array(requests.iter().map(|r| answer(ledger, r)).collect()),
        request => answer(ledger, request),
    }
}

fn answer(ledger: &Shared, request: &Value) -> Value {
    let id = request.get("id").cloned().unwrap_or(Value::Null);
    let outcome = match request.get("method").and_then(Value::as_str) {
        None => Err(RpcError { code: -32600, message: "Invalid request".into(), data: None }),
        Some(method) => {
            let params = request.get("params").and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
            // A call that panics (inside LiteSVM) may have left a transaction applied and not
            // recorded: the lock is then poisoned, and the ledger answers nothing more.
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match ledger.lock() {
                Ok(mut ledger) => call(&mut ledger, method, params),
                Err(_) => Err(RpcError::stopped()),
            }))
            .unwrap_or_else(|_| {
                tracing::error!(method, "the embedded ledger failed inside a call and stops answering");
                Err(RpcError::stopped())
            })
        }
    };
    match outcome {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err(e) => {
            let mut error = json!({"code": e.code, "message": e.message});
            if let Some(data) = e.data {
                error["data"] = data;
            }
            json!({"jsonrpc": "2.0", "id": id, "error": error})
        }
    }
}

fn call(ledger: &mut Ledger, method: &str, params: &[Value]) -> Result<Value, RpcError> {
    let slot = ledger.height();
    let with_context = |value: Value| json!({"context": {"slot": slot}, "value": value});
    Ok(match method {
        "getHealth" => json!("ok"),
        "getVersion" => json!({"solana-core": "4.2.2", "feature-set": 0}),
        "getGenesisHash" => json!(ledger.genesis().to_string()),
        "getSlot" | "getBlockHeight" => json!(ledger.height()),
        "getLatestBlockhash" => {
            let (blockhash, last_valid_block_height) = ledger.latest_blockhash();
            with_context(json!(RpcBlockhash { blockhash: blockhash.to_string(), last_valid_block_height }))
        }
        "isBlockhashValid" => {
            let hash = text(params, 0)?.parse().map_err(|_| RpcError::invalid_params("invalid blockhash"))?;
            with_context(json!(ledger.blockhash_valid(&hash)))
        }
        "getFeeForMessage" => {
            let message: VersionedMessage = decode(text(params, 0)?, "base64")?;
            let fee = ledger.fee_for(message);
            with_context(json!(fee))
        }
        "getMinimumBalanceForRentExemption" => {
            let len = params.first().and_then(Value::as_u64).and_then(|l| usize::try_from(l).ok());
            let len = len.ok_or_else(|| RpcError::invalid_params("invalid data length"))?;
            json!(ledger.rent_exempt_minimum(len))
        }
        "getBalance" => with_context(json!(ledger.account(&address(params, 0)?).map_or(0, |a| a.lamports))),
        "getAccountInfo" => with_context(ui_account(ledger.account(&address(params, 0)?).as_ref())),
        "getMultipleAccounts" => {
            let keys = params.first().and_then(Value::as_array).ok_or_else(|| RpcError::invalid_params("keys"))?;
            let accounts = keys
                .iter()
                .map(|k| Ok(ui_account(ledger.account(&parse_address(k.as_str())?).as_ref())))
                .collect::<Result<Vec<_>, RpcError>>()?;
            with_context(json!(accounts))
        }
        "sendTransaction" => {
            let config = params.get(1).unwrap_or(&Value::Null);
            let tx: VersionedTransaction = decode(text(params, 0)?, encoding(config, "base58"))?;
            let preflight = if config["skipPreflight"] == true { Preflight::Skip } else { Preflight::Check };
            json!(ledger.send(tx, preflight).map_err(refusal)?.to_string())
        }
        "simulateTransaction" => {
            let config = params.get(1).unwrap_or(&Value::Null);
            let tx: VersionedTransaction = decode(text(params, 0)?, encoding(config, "base58"))?;
            let sig_verify = config["sigVerify"] == true;
            let replace = config["replaceRecentBlockhash"] == true;
            if sig_verify && replace {
                return Err(RpcError::invalid_params("sigVerify may not be used with replaceRecentBlockhash"));
            }
            let replacement = replace.then(|| ledger.latest_blockhash());
            let execution = ledger.simulate(tx, sig_verify, replace);
            let mut result = simulation(execution);
            result.replacement_blockhash = replacement.map(|(hash, last_valid_block_height)| RpcBlockhash {
                blockhash: hash.to_string(),
                last_valid_block_height,
            });
            with_context(json!(result))
        }
        "getSignatureStatuses" => {
            let signatures =
                params.first().and_then(Value::as_array).ok_or_else(|| RpcError::invalid_params("signatures"))?;
            if signatures.len() > MAX_STATUSES {
                return Err(RpcError::invalid_params(format!("Too many inputs provided; max {MAX_STATUSES}")));
            }
            let statuses = signatures
                .iter()
                .map(|s| {
                    let signature = parse_signature(s.as_str())?;
                    Ok(ledger.landed(&signature).map(status))
                })
                .collect::<Result<Vec<_>, RpcError>>()?;
            with_context(json!(statuses))
        }
        "getTransaction" => {
            let signature = parse_signature(params.first().and_then(Value::as_str))?;
            let config = params.get(1).unwrap_or(&Value::Null);
            let binary = match encoding(config, "json") {
                "base64" => TransactionBinaryEncoding::Base64,
                "base58" => TransactionBinaryEncoding::Base58,
                other => {
                    return Err(RpcError::invalid_params(format!(
                        "encoding {other} is not served by the embedded ledger; ask for base64"
                    )));
                }
            };
            let max_version = config.get("maxSupportedTransactionVersion").and_then(Value::as_u64);
            match ledger.landed(&signature) {
                None => Value::Null,
                Some(landed) => json!(confirmed_transaction(landed, binary, max_version)?),
            }
        }
        "requestAirdrop" => {
            let to = address(params, 0)?;
            let lamports = params.get(1).and_then(Value::as_u64).ok_or_else(|| RpcError::invalid_params("lamports"))?;
            json!(ledger.airdrop(&to, lamports).map_err(refusal)?.to_string())
        }
        "tollgate_setAccount" => {
            let to = address(params, 0)?;
            let spec = params.get(1).ok_or_else(|| RpcError::invalid_params("account"))?;
            let data = base64::engine::general_purpose::STANDARD
                .decode(spec["data"].as_str().unwrap_or(""))
                .map_err(|_| RpcError::invalid_params("data must be base64"))?;
            let account = Account {
                lamports: spec["lamports"].as_u64().ok_or_else(|| RpcError::invalid_params("lamports"))?,
                data,
                owner: parse_address(spec["owner"].as_str())?,
                executable: spec["executable"] == true,
                rent_epoch: 0,
            };
            ledger.set_account(to, account).map_err(RpcError::invalid_params)?;
            Value::Null
        }
        other => return Err(RpcError { code: -32601, message: format!("Method not found: {other}"), data: None }),
    })
}

fn text(params: &[Value], index: usize) -> Result<&str, RpcError> {
    params.get(index).and_then(Value::as_str).ok_or_else(|| RpcError::invalid_params(format!("parameter {index}")))
}

fn encoding<'a>(config: &'a Value, default: &'a str) -> &'a str {
    config.get("encoding").and_then(Value::as_str).unwrap_or(default)
}

fn parse_address(text: Option<&str>) -> Result<Pubkey, RpcError> {
    text.and_then(|t| t.parse().ok()).ok_or_else(|| RpcError::invalid_params("Invalid param: Invalid"))
}

fn address(params: &[Value], index: usize) -> Result<Pubkey, RpcError> {
    parse_address(params.get(index).and_then(Value::as_str))
}

fn parse_signature(text: Option<&str>) -> Result<Signature, RpcError> {
    text.and_then(|t| t.parse().ok()).ok_or_else(|| RpcError::invalid_params("Invalid param: Invalid signature"))
}

/// A transaction or message sent as base64 or base58 bincode.
fn decode<T: serde::de::DeserializeOwned>(text: &str, encoding: &str) -> Result<T, RpcError> {
    let bytes = match encoding {
        "base64" => base64::engine::general_purpose::STANDARD.decode(text).ok(),
        "base58" => bs58::decode(text).into_vec().ok(),
        other => return Err(RpcError::invalid_params(format!("unsupported encoding: {other}"))),
    }
    .ok_or_else(|| RpcError::invalid_params(format!("invalid {encoding} encoding")))?;
    bincode::deserialize(&bytes).map_err(|e| RpcError::invalid_params(format!("failed to deserialize: {e}")))
}

fn ui_account(account: Option<&Account>) -> Value {
    account.map_or(Value::Null, |a| {
        json!({
            "lamports": a.lamports,
            "data": [base64::engine::general_purpose::STANDARD.encode(&a.data), "base64"],
            "owner": a.owner.to_string(),
            "executable": a.executable,
            "rentEpoch": a.rent_epoch,
            "space": a.data.len(),
        })
    })
}

fn simulation(execution: Execution) -> RpcSimulateTransactionResult {
    RpcSimulateTransactionResult {
        err: execution.err.map(Into::into),
        logs: Some(execution.logs),
        accounts: None,
        units_consumed: Some(execution.units),
        loaded_accounts_data_size: None,
        return_data: None,
        inner_instructions: None,
        replacement_blockhash: None,
        fee: Some(execution.fee),
        pre_balances: None,
        post_balances: None,
        pre_token_balances: None,
        post_token_balances: None,
        loaded_addresses: None,
    }
}

/// A transaction the ledger would not land, as a node's preflight refuses it.
fn refusal(execution: Execution) -> RpcError {
    if execution.err == Some(TransactionError::SignatureFailure) {
        return RpcError {
            code: custom_error::JSON_RPC_SERVER_ERROR_TRANSACTION_SIGNATURE_VERIFICATION_FAILURE,
            message: "Transaction signature verification failure".into(),
            data: None,
        };
    }
    let message = execution
        .err
        .as_ref()
        .map_or_else(|| "Transaction simulation failed".to_owned(), |e| format!("Transaction simulation failed: {e}"));
    RpcError {
        code: custom_error::JSON_RPC_SERVER_ERROR_SEND_TRANSACTION_PREFLIGHT_FAILURE,
        message,
        data: Some(json!(simulation(execution))),
    }
}

/// Every landed transaction is rooted at once: the ledger has no forks.
fn status(landed: &Landed) -> TransactionStatus {
    TransactionStatus {
        slot: landed.slot,
        confirmations: None,
        status: landed.err.clone().map_or(Ok(()), Err),
        err: landed.err.clone(),
        confirmation_status: Some(TransactionConfirmationStatus::Finalized),
    }
}

fn confirmed_transaction(
    landed: &Landed,
    encoding: TransactionBinaryEncoding,
    max_version: Option<u64>,
) -> Result<EncodedConfirmedTransactionWithStatusMeta, RpcError> {
    use solana_sdk::transaction::{Legacy, TransactionVersion};
    let version = match &landed.transaction.message {
        VersionedMessage::Legacy(_) => TransactionVersion::Legacy(Legacy::Legacy),
        VersionedMessage::V0(_) => TransactionVersion::Number(0),
        VersionedMessage::V1(_) => TransactionVersion::Number(1),
    };
    if let TransactionVersion::Number(n) = version
        && max_version.is_none_or(|max| max < u64::from(n))
    {
        return Err(RpcError {
            code: custom_error::JSON_RPC_SERVER_ERROR_UNSUPPORTED_TRANSACTION_VERSION,
            message: format!(
                "Transaction version ({n}) is not supported by the requesting client. Please try the request \
                 again with the following configuration parameter: \"maxSupportedTransactionVersion\": {n}"
            ),
            data: None,
        });
    }
    let bytes = bincode::serialize(&landed.transaction).map_err(|e| RpcError::invalid_params(e.to_string()))?;
    let text = match encoding {
        TransactionBinaryEncoding::Base64 => base64::engine::general_purpose::STANDARD.encode(bytes),
        TransactionBinaryEncoding::Base58 => bs58::encode(bytes).into_string(),
    };
    let tokens = |list: &[Holding]| OptionSerializer::Some(list.iter().map(token_balance).collect::<Vec<_>>());
    let keys = |list: &[Pubkey]| list.iter().map(ToString::to_string).collect();
    let meta = UiTransactionStatusMeta {
        err: landed.err.clone().map(Into::into),
        status: landed.err.clone().map_or(Ok(()), |e| Err(e.into())),
        fee: landed.fee,
        pre_balances: landed.lamports.0.clone(),
        post_balances: landed.lamports.1.clone(),
        inner_instructions: OptionSerializer::None,
        log_messages: OptionSerializer::Some(landed.logs.clone()),
        pre_token_balances: tokens(&landed.tokens.0),
        post_token_balances: tokens(&landed.tokens.1),
        rewards: OptionSerializer::None,
        loaded_addresses: OptionSerializer::Some(UiLoadedAddresses {
            writable: keys(&landed.loaded.0),
            readonly: keys(&landed.loaded.1),
        }),
        return_data: OptionSerializer::Skip,
        compute_units_consumed: OptionSerializer::Some(landed.units),
        cost_units: OptionSerializer::Skip,
    };
    Ok(EncodedConfirmedTransactionWithStatusMeta {
        slot: landed.slot,
        transaction: EncodedTransactionWithStatusMeta {
            transaction: EncodedTransaction::Binary(text, encoding),
            meta: Some(meta),
            version: Some(version),
        },
        block_time: Some(landed.block_time),
        transaction_index: None,
    })
}

/// A token balance with its amount in exact decimal text (`uiAmount`, a float, is left out).
fn token_balance(h: &Holding) -> UiTransactionTokenBalance {
    UiTransactionTokenBalance {
        account_index: h.index,
        mint: h.mint.to_string(),
        ui_token_amount: solana_account_decoder_client_types::token::UiTokenAmount {
            ui_amount: None,
            decimals: h.decimals,
            amount: h.amount.to_string(),
            ui_amount_string: decimal_text(h.amount, h.decimals),
        },
        owner: OptionSerializer::Some(h.owner.to_string()),
        program_id: OptionSerializer::Some(h.program.to_string()),
    }
}

/// `amount` base units of a token with `decimals` decimals, as exact decimal text without
/// trailing zeros ("1.5", "0.000001", "42").
fn decimal_text(amount: u64, decimals: u8) -> String {
    let digits = amount.to_string();
    let decimals = usize::from(decimals);
    if decimals == 0 {
        return digits;
    }
    let padded = format!("{digits:0>width$}", width = decimals + 1);
    let (whole, fraction) = padded.split_at(padded.len() - decimals);
    let fraction = fraction.trim_end_matches('0');
    if fraction.is_empty() { whole.to_owned() } else { format!("{whole}.{fraction}") }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use base64::Engine as _;
    use serde_json::{Value, json};
    use solana_sdk::pubkey::Pubkey;
    use solana_sdk::signature::Keypair;
    use solana_sdk::signer::Signer as _;
    use solana_sdk::transaction::Transaction;
    use tollgate_encoding::solana::Transfer;

    use super::{Ledger, Shared, answer, decimal_text};

    fn ledger() -> Shared {
        Arc::new(Mutex::new(Ledger::new().unwrap()))
    }

    fn rpc(ledger: &Shared, method: &str, params: Value) -> Value {
        answer(ledger, &json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}))
    }

    fn signed_transfer(ledger: &Shared, from: &Keypair, lamports: u64) -> Transaction {
        let blockhash = ledger.lock().unwrap().latest_blockhash().0;
        let message = Transfer { from: from.pubkey(), to: Pubkey::new_unique(), lamports, priority_fee: None }
            .message(&blockhash);
        Transaction::new(&[from], message, blockhash)
    }

    fn base64(tx: &Transaction) -> String {
        base64::engine::general_purpose::STANDARD.encode(bincode::serialize(tx).unwrap())
    }

    #[test]
    fn requests_a_node_would_refuse_get_json_rpc_errors_not_answers() {
        let ledger = ledger();
        assert_eq!(rpc(&ledger, "getEverything", json!([]))["error"]["code"], -32601);
        assert_eq!(rpc(&ledger, "getBalance", json!(["not an address"]))["error"]["code"], -32602);
        assert_eq!(rpc(&ledger, "getBalance", json!([]))["error"]["code"], -32602);
        assert_eq!(rpc(&ledger, "sendTransaction", json!(["%%%", {"encoding": "base64"}]))["error"]["code"], -32602);
        assert_eq!(
            rpc(&ledger, "requestAirdrop", json!([Pubkey::new_unique().to_string(), -1]))["error"]["code"],
            -32602
        );
        assert_eq!(answer(&ledger, &json!({"id": 1}))["error"]["code"], -32600);
        assert_eq!(rpc(&ledger, "getMinimumBalanceForRentExemption", json!([-1]))["error"]["code"], -32602);
        let too_many: Vec<String> = (0..257).map(|_| solana_sdk::signature::Signature::default().to_string()).collect();
        assert_eq!(rpc(&ledger, "getSignatureStatuses", json!([too_many]))["error"]["code"], -32602);
        let sim = json!([base64(&signed_transfer(&ledger, &Keypair::new(), 1)), {"encoding": "base64", "sigVerify": true, "replaceRecentBlockhash": true}]);
        assert_eq!(rpc(&ledger, "simulateTransaction", sim)["error"]["code"], -32602);
    }

    #[test]
    fn a_refused_send_says_why_as_a_node_does() {
        let ledger = ledger();
        let payer = Keypair::new();
        let airdrop = rpc(&ledger, "requestAirdrop", json!([payer.pubkey().to_string(), 1_000_000_000u64]));
        assert!(airdrop["result"].is_string(), "{airdrop}");
        let too_much = signed_transfer(&ledger, &payer, 5_000_000_000);
        let refused = rpc(&ledger, "sendTransaction", json!([base64(&too_much), {"encoding": "base64"}]));
        assert_eq!(refused["error"]["code"], -32002, "{refused}");
        assert!(refused["error"]["message"].as_str().unwrap().starts_with("Transaction simulation failed"));
        assert!(refused["error"]["data"]["err"].is_object(), "{refused}");
        let mut forged = signed_transfer(&ledger, &payer, 1_000_000);
        forged.signatures[0] = solana_sdk::signature::Signature::from([7; 64]);
        let refused = rpc(&ledger, "sendTransaction", json!([base64(&forged), {"encoding": "base64"}]));
        assert_eq!(refused["error"]["code"], -32003, "{refused}");
        let status = rpc(&ledger, "getSignatureStatuses", json!([[forged.signatures[0].to_string()]]));
        assert_eq!(status["result"]["value"], json!([null]), "nothing landed");
    }

    #[test]
    fn a_landed_transfer_reads_back_as_a_finalized_transaction_with_its_balances() {
        let ledger = ledger();
        let payer = Keypair::new();
        rpc(&ledger, "requestAirdrop", json!([payer.pubkey().to_string(), 1_000_000_000u64]));
        let tx = signed_transfer(&ledger, &payer, 2_000_000);
        let sent =
            rpc(&ledger, "sendTransaction", json!([bs58::encode(bincode::serialize(&tx).unwrap()).into_string()]));
        let signature = sent["result"].as_str().unwrap().to_owned();
        assert_eq!(signature, tx.signatures[0].to_string());
        let batch = json!([
            {"jsonrpc": "2.0", "id": 1, "method": "getSignatureStatuses", "params": [[signature]]},
            {"jsonrpc": "2.0", "id": 2, "method": "getTransaction", "params": [signature, {"encoding": "base64"}]},
        ]);
        let answers = super::answer_all(&ledger, &batch);
        let status = &answers[0]["result"]["value"][0];
        assert_eq!((status["confirmationStatus"].as_str(), status["err"].is_null()), (Some("finalized"), true));
        let meta = &answers[1]["result"]["meta"];
        assert_eq!(meta["fee"], 5_000);
        assert_eq!(meta["preBalances"].as_array().unwrap()[..2], [json!(1_000_000_000u64), json!(0)]);
        let after = [json!(1_000_000_000u64 - 2_005_000), json!(2_000_000)];
        assert_eq!(meta["postBalances"].as_array().unwrap()[..2], after);
        assert_eq!(answers[1]["result"]["version"], "legacy");
    }

    /// A call that panicked may have left a transaction applied and not recorded: the ledger
    /// says it stopped rather than serve that state.
    #[test]
    fn a_ledger_that_failed_inside_a_call_answers_nothing_more() {
        let ledger = ledger();
        let failing = ledger.clone();
        let _ = std::thread::spawn(move || {
            let _held = failing.lock().unwrap();
            panic!("a panic inside LiteSVM");
        })
        .join();
        let answer = rpc(&ledger, "getHealth", json!([]));
        assert_eq!(answer["error"]["code"], -32005, "{answer}");
    }

    #[test]
    fn token_amounts_are_exact_decimal_text() {
        assert_eq!(decimal_text(1_500_000, 6), "1.5");
        assert_eq!(decimal_text(1, 6), "0.000001");
        assert_eq!(decimal_text(42, 0), "42");
        assert_eq!(decimal_text(0, 9), "0");
        assert_eq!(decimal_text(u64::MAX, 18), "18.446744073709551615");
        assert_eq!(decimal_text(10_000_000, 6), "10");
    }
}
