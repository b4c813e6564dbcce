//! The executor: a plan run step by step across hosts.
