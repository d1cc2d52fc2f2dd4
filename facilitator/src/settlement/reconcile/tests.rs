//! Tests of the reconciler.
