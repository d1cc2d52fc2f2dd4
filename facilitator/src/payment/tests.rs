//! Tests of the payment core.
