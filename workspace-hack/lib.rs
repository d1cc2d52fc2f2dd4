//! Feature unification for the Tollgate workspace: see scripts/workspace-hack. No code.
