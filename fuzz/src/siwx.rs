//! `SIGN-IN-WITH-X` headers (a pass holder signing in) and the origins they are bound to.

use tollgate_protocol::siwx::{self, Origin, SignIn};

/// What this target feeds and what it asserts.
pub const ABOUT: &str = "sign-in-with-x headers: a read header encodes back to itself; the message a wallet signs \
                         is written only from fields without line breaks (one text, one reading); origins are canonical";

/// Runs one input; panics when a property breaks.
pub fn check(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(origin) = Origin::parse(text) {
        assert_eq!(Origin::parse(&origin.origin).as_ref(), Ok(&origin), "an origin is not canonical");
        assert!(!origin.host.contains(['/', '@', '?', '#']), "origin host {:?}", origin.host);
    }
    let Ok(sign_in) = SignIn::from_header(text) else { return };
    let again = SignIn::from_header(&sign_in.to_header()).expect("a read header encodes to a readable one");
    assert_eq!(again, sign_in, "a sign-in changed through encode and decode");
    let Some(message) = siwx::message(&sign_in) else { return };
    let mut fields = vec![
        &sign_in.domain,
        &sign_in.address,
        &sign_in.uri,
        &sign_in.version,
        &sign_in.chain_id,
        &sign_in.nonce,
        &sign_in.issued_at,
    ];
    fields.extend(
        [&sign_in.statement, &sign_in.expiration_time, &sign_in.not_before, &sign_in.request_id].into_iter().flatten(),
    );
    fields.extend(sign_in.resources.iter().flatten());
    for field in fields {
        assert!(
            !field.contains(['\n', '\r']),
            "a message was written from a field with a line break ({field:?}): another set of fields could \
             write the same text\n{message}"
        );
    }
}
