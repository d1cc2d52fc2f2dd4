//! Secrets a seller configures never show: not in `Debug` output, not in the reasons the layer
//! logs when its facilitator cannot be reached.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test

use tollgate::{Facilitator as _, FacilitatorClient, PaymentLayer, Price, Verdict};

const KEY: &str = "tg_live_SECRETKEYSECRETKEYSECRETKEYSECRETKEY123";

#[test]
fn debug_output_never_shows_the_api_key_or_the_url_path() {
    let client = FacilitatorClient::new("https://user:SECRETPW@gateway.example:8443/SECRETPATH/", KEY);
    let shown = format!("{client:?}");
    assert!(!shown.contains("SECRET"), "{shown}");
    assert!(shown.contains("https://gateway.example:8443/…") && shown.contains("[REDACTED]"), "{shown}");

    let layer = PaymentLayer::builder()
        .facilitator(client)
        .accept(
            Price::native_sol("0.01")
                .unwrap()
                .on("solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1".parse().unwrap())
                .pay_to("9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin".parse().unwrap()),
        )
        .build()
        .unwrap();
    let shown = format!("{layer:?} {:#?}", layer.clone());
    assert!(!shown.contains("SECRET"), "{shown}");
}

#[tokio::test]
async fn an_unreachable_facilitator_is_reported_without_its_credentials() {
    // A port nothing listens on: bind one, then close it.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let client = FacilitatorClient::new(format!("http://127.0.0.1:{port}/v2/SECRETPATH?api-key=SECRETQ"), KEY);
    let Err(Verdict::Unavailable { reason, .. }) = client.supported().await else {
        panic!("a closed port cannot answer")
    };
    assert!(!reason.contains("SECRET"), "{reason}");
    assert!(reason.contains(&format!("127.0.0.1:{port}")), "the host still shows: {reason}");
}
