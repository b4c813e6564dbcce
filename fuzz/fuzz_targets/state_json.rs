//! Terraform/OpenTofu state documents as the state backend receives them.
#![no_main]

use bosun_core::state::StateDoc;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(doc) = StateDoc::parse(data) {
        assert!(!doc.lineage.is_empty());
    }
});
