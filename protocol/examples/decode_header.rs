//! Decodes an `X-PAYMENT` / `PAYMENT-SIGNATURE` header value and prints what it pays.
//!
//! ```sh
//! cargo run -p tollgate-protocol --example decode_header -- eyJ4NDAyVmVyc2lvbiI6…
//! ```

use std::process::ExitCode;

use tollgate_protocol::x402::PaymentPayload;

fn main() -> ExitCode {
    let Some(value) = std::env::args().nth(1) else {
        eprintln!("usage: decode_header <base64 header value>");
        return ExitCode::from(2);
    };
    match PaymentPayload::from_header(value.trim()) {
        Ok(payload) => {
            println!("x402 version {}", payload.version());
            println!("scheme       {}", payload.scheme());
            println!("network      {} ({} chain)", payload.network(), payload.network().family());
            if let PaymentPayload::V2(v2) = &payload {
                println!("amount       {} atomic units", v2.accepted.amount.get());
                println!("pay to       {}", v2.accepted.pay_to);
            }
            println!("proof        {}", payload.payload());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("not a payment header: {e}");
            ExitCode::FAILURE
        }
    }
}
