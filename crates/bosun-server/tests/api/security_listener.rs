//! Security regression tests (issue: safe to expose).
