//! Tests of the configuration's layering and validation.

use super::*;
use std::collections::HashMap;

fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    move |k| map.get(k).cloned()
}

#[test]
fn defaults_without_any_source() {
    let c = Config::load(None, env_of(&[]), &Flags::default()).unwrap();
    assert_eq!(c, Config::default());
    assert_eq!(c.listen.to_string(), DEFAULT_LISTEN);
    assert_eq!(c.database_url.expose(), DEFAULT_DATABASE);
    assert_eq!(c.plans.get(Plan::Standard).rpm, 100);
    assert_eq!(c.plans.get(Plan::Premium).rpm, 1000);
}

#[test]
fn layers_override_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tollgate.toml");
    std::fs::write(
        &file,
        r#"
listen = "127.0.0.1:9000"
database_url = "file.db"
public_supported = true
[plans.standard]
rpm = 5
[[evm]]
network = "eip155:31337"
rpc_url = "http://127.0.0.1:8545"
"#,
    )
    .unwrap();
    let env =
        env_of(&[("TOLLGATE_LISTEN", "127.0.0.1:9001"), ("TOLLGATE_DATABASE_URL", "postgres://u:p@127.0.0.1/db")]);
    let flags = Flags { listen: Some("127.0.0.1:9002".parse().unwrap()), ..Flags::default() };
    let c = Config::load(Some(&file), env, &flags).unwrap();
    assert_eq!(c.listen.port(), 9002, "flag beats env beats file");
    assert_eq!(c.database_url.expose(), "postgres://u:p@127.0.0.1/db", "env beats file");
    assert!(c.public_supported, "file beats default");
    assert_eq!(c.plans.get(Plan::Standard).rpm, 5);
    assert_eq!(c.plans.get(Plan::Premium).rpm, 1000, "untouched plan keeps its default");
    assert_eq!(c.evm[0].network, Network::eip155(31337));
    let only_file = Config::load(Some(&file), env_of(&[]), &Flags::default()).unwrap();
    assert_eq!(only_file.listen.port(), 9000);
    assert_eq!(only_file.database_url.expose(), "sqlite://file.db");
}

#[test]
fn unknown_and_invalid_settings_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.toml");
    std::fs::write(&file, "lisen = \"127.0.0.1:1\"\n").unwrap();
    assert!(matches!(Config::load(Some(&file), env_of(&[]), &Flags::default()), Err(ConfigError::Parse { .. })));
    std::fs::write(&file, "[plans.standard]\nrpm = 0\n").unwrap();
    assert!(matches!(Config::load(Some(&file), env_of(&[]), &Flags::default()), Err(ConfigError::Invalid(_))));
    assert!(Config::load(None, env_of(&[("TOLLGATE_LISTEN", "nowhere")]), &Flags::default()).is_err());
    assert!(Config::load(None, env_of(&[("TOLLGATE_DATABASE_URL", "mysql://x")]), &Flags::default()).is_err());
    assert!(Config::load(Some(&dir.path().join("missing.toml")), env_of(&[]), &Flags::default()).is_err());
}

#[test]
fn dev_master_key_lives_beside_the_database() {
    let mut c = Config::default();
    assert_eq!(c.dev_master_key_path(), PathBuf::from("tollgate-master.key"));
    c.database_url = DatabaseUrl::parse("sqlite:///var/lib/tollgate/t.db?mode=rwc").unwrap();
    assert_eq!(c.dev_master_key_path(), PathBuf::from("/var/lib/tollgate/tollgate-master.key"));
    c.database_url = DatabaseUrl::parse("postgres://u@h/db").unwrap();
    assert_eq!(c.dev_master_key_path(), PathBuf::from("tollgate-master.key"));
}

#[test]
fn secrets_are_redacted_in_debug() {
    let env = env_of(&[
        ("TOLLGATE_MASTER_KEY", "master-secret-value"),
        ("TOLLGATE_ADMIN_TOKEN", "admin-secret-value"),
        ("TOLLGATE_DATABASE_URL", "postgres://user:db-secret-value@127.0.0.1:5432/test?password=other-secret"),
    ]);
    let c = Config::load(None, env, &Flags::default()).unwrap();
    let debug = format!("{c:?}");
    for secret in ["master-secret-value", "admin-secret-value", "db-secret-value", "other-secret"] {
        assert!(!debug.contains(secret), "{secret} leaked in {debug}");
    }
    assert!(debug.contains("[REDACTED]"));
    assert!(debug.contains("postgres://user:[REDACTED]@127.0.0.1:5432/test"));
    assert_eq!(c.master_key.as_ref().map(Secret::expose), Some("master-secret-value"));
}

#[test]
fn the_redis_url_comes_from_file_or_env_and_is_never_printed() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tollgate.toml");
    std::fs::write(&file, "redis_url = \"redis://:file-secret@127.0.0.1:6379/0\"\n").unwrap();
    let from_file = Config::load(Some(&file), env_of(&[]), &Flags::default()).unwrap();
    assert_eq!(from_file.redis_url.as_ref().unwrap().expose(), "redis://:file-secret@127.0.0.1:6379/0");
    let env = env_of(&[("TOLLGATE_REDIS_URL", "redis://:env-secret@127.0.0.1:6380")]);
    let c = Config::load(Some(&file), env, &Flags::default()).unwrap();
    assert_eq!(c.redis_url.as_ref().unwrap().expose(), "redis://:env-secret@127.0.0.1:6380", "env beats file");
    let printed = format!("{c:?}");
    assert!(!printed.contains("env-secret") && !printed.contains("file-secret"), "{printed}");
    assert_eq!(Config::default().redis_url, None, "in-process limits by default");
    for bad in ["http://127.0.0.1:6379", "rediss://h:6379", "127.0.0.1:6379"] {
        let err = Config::load(None, env_of(&[("TOLLGATE_REDIS_URL", bad)]), &Flags::default()).unwrap_err();
        assert!(err.to_string().contains("redis://"), "{err}");
    }
}

#[test]
fn the_database_pool_size_is_a_limit_with_a_floor() {
    assert_eq!(Config::default().limits.database_max_connections, 16);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tollgate.toml");
    std::fs::write(&file, "[limits]\ndatabase_max_connections = 5\n").unwrap();
    assert_eq!(Config::load(Some(&file), env_of(&[]), &Flags::default()).unwrap().limits.database_max_connections, 5);
    std::fs::write(&file, "[limits]\ndatabase_max_connections = 0\n").unwrap();
    let floor = Config::load(Some(&file), env_of(&[]), &Flags::default()).unwrap();
    assert_eq!(floor.limits.database_max_connections, 2, "one to listen with, one to work with");
    assert_eq!(Config::default().limits.nonce_lease_connections, 8);
    std::fs::write(&file, "[limits]\nnonce_lease_connections = 0\n").unwrap();
    let floor = Config::load(Some(&file), env_of(&[]), &Flags::default()).unwrap();
    assert_eq!(floor.limits.nonce_lease_connections, 1);
}

#[test]
fn development_mode_is_only_ever_asked_for() {
    let plain = Config::load(None, env_of(&[]), &Flags::default()).unwrap();
    assert!(!plain.dev, "no flag, no variable: production");
    let err = plain.check_serve().unwrap_err().to_string();
    for named in ["TOLLGATE_SOLANA_RPC_URL", "TOLLGATE_EVM_RPC_URL", "--dev"] {
        assert!(err.contains(named), "the refusal names {named}: {err}");
    }
    // A mistyped variable does not switch development mode on; a wrong value is refused.
    assert!(!Config::load(None, env_of(&[("TOLLGATE_DEVV", "1")]), &Flags::default()).unwrap().dev);
    assert!(Config::load(None, env_of(&[("TOLLGATE_DEV", "maybe")]), &Flags::default()).is_err());
    let by_env = Config::load(None, env_of(&[("TOLLGATE_DEV", "1")]), &Flags::default()).unwrap();
    let by_flag = Config::load(None, env_of(&[]), &Flags { dev: true, ..Flags::default() }).unwrap();
    assert!(by_env.dev && by_flag.dev);
    assert_eq!(by_flag.check_serve().is_ok(), cfg!(feature = "embedded-ledger"));
    // Development mode runs its own ledger: a configured Solana RPC beside it is a mistake.
    let both = Config::load(
        None,
        env_of(&[("TOLLGATE_DEV", "true"), ("TOLLGATE_SOLANA_RPC_URL", "http://127.0.0.1:8899")]),
        &Flags::default(),
    )
    .unwrap();
    if cfg!(feature = "embedded-ledger") {
        assert!(both.check_serve().unwrap_err().to_string().contains("TOLLGATE_SOLANA_RPC_URL"));
    }
}

#[test]
fn any_one_chain_is_enough_outside_development_mode() {
    for env in [
        vec![("TOLLGATE_SOLANA_RPC_URL", "http://127.0.0.1:8899")],
        vec![("TOLLGATE_EVM_RPC_URL", "http://127.0.0.1:8545")],
    ] {
        let c = Config::load(None, env_of(&env), &Flags::default()).unwrap();
        assert!(c.check_serve().is_ok(), "{env:?}");
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("evm.toml");
    std::fs::write(&file, "[[evm]]\nnetwork = \"eip155:8453\"\nrpc_url = \"http://127.0.0.1:8545\"\n").unwrap();
    assert!(Config::load(Some(&file), env_of(&[]), &Flags::default()).unwrap().check_serve().is_ok());
}

#[test]
fn rpc_urls_never_print_their_key() {
    for (url, shown) in [
        ("https://eth-mainnet.g.alchemy.com/v2/SECRETKEY", "https://eth-mainnet.g.alchemy.com/…"),
        ("https://mainnet.helius-rpc.com/?api-key=SECRETKEY", "https://mainnet.helius-rpc.com/…"),
        ("https://user:SECRETKEY@rpc.example:8545", "https://rpc.example:8545"),
        ("http://127.0.0.1:8545", "http://127.0.0.1:8545"),
        ("http://127.0.0.1:8545/", "http://127.0.0.1:8545"),
        ("SECRETKEY", "[REDACTED]"),
    ] {
        assert_eq!(RpcUrl::new(url).to_string(), shown);
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("keys.toml");
    std::fs::write(&file, "[[evm]]\nnetwork = \"eip155:8453\"\nrpc_url = \"https://base.example/v3/SECRETKEY\"\n")
        .unwrap();
    let c = Config::load(
        Some(&file),
        env_of(&[
            ("TOLLGATE_SOLANA_RPC_URL", "https://sol.example/?api-key=SECRETKEY"),
            ("TOLLGATE_EVM_RPC_URL", "https://eth.example/SECRETKEY"),
            ("TOLLGATE_MASTER_KEY", "SECRETKEY"),
            ("TOLLGATE_REDIS_URL", "redis://:SECRETKEY@127.0.0.1:6379"),
            ("TOLLGATE_DATABASE_URL", "postgres://u:SECRETKEY@127.0.0.1/db"),
        ]),
        &Flags::default(),
    )
    .unwrap();
    let printed = format!("{c:?}");
    assert!(!printed.contains("SECRETKEY"), "{printed}");
    assert!(printed.contains("sol.example") && printed.contains("base.example"), "{printed}");
}

#[test]
fn sponsorship_budgets_margin_and_solana_depth_are_read_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tollgate.toml");
    std::fs::write(
        &file,
        r#"
solana_commitment = "finalized"
[limits]
evm_valid_before_margin_secs = 2
evm_nonce_gap_secs = 0
[plans.premium]
sponsor_sol_per_day = "0.5"
sponsor_eth_per_day = "0.000000000000000001"
"#,
    )
    .unwrap();
    let c = Config::load(Some(&file), env_of(&[]), &Flags::default()).unwrap();
    assert_eq!(c.solana_commitment, SolanaCommitment::Finalized);
    assert_eq!(c.limits.evm_valid_before_margin_secs, 6, "never under 6 s");
    assert_eq!(c.limits.evm_nonce_gap_secs, 1, "never under 1 s");
    assert_eq!(Limits::default().evm_nonce_gap_secs, 30);
    let premium = c.plans.get(Plan::Premium).sponsorship;
    assert_eq!((premium.lamports_per_day, premium.wei_per_day), (500_000_000, 1));
    assert_eq!(c.plans.get(Plan::Standard).sponsorship.lamports_per_day, 10_000_000, "defaults kept");
    let env = env_of(&[("TOLLGATE_SOLANA_COMMITMENT", "confirmed")]);
    assert_eq!(
        Config::load(Some(&file), env, &Flags::default()).unwrap().solana_commitment,
        SolanaCommitment::Confirmed
    );
    for bad in ["\"0.0000000001\"", "\"ten\"", "\"10000000000\""] {
        std::fs::write(&file, format!("[plans.standard]\nsponsor_sol_per_day = {bad}\n")).unwrap();
        assert!(Config::load(Some(&file), env_of(&[]), &Flags::default()).is_err(), "{bad}");
    }
    let env = env_of(&[("TOLLGATE_SOLANA_COMMITMENT", "processed")]);
    assert!(Config::load(None, env, &Flags::default()).is_err());
}
