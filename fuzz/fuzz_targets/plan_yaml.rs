//! Plan and inventory files: parsed (both inventory readings), then linted together.
#![no_main]

use std::path::Path;

use bosun_plans::model::{lint, parse_inventory, parse_inventory_as_written, parse_plan};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let plan = parse_plan(Path::new("plan.yaml"), text);
    let inventory = parse_inventory(Path::new("inventory.yaml"), text);
    let _ = parse_inventory_as_written(Path::new("inventory.yaml"), text);
    if let Ok(plan) = &plan {
        let _ = lint(plan, inventory.as_ref().ok());
        if let Ok(inventory) = &inventory {
            let _ = plan.target_hosts(inventory);
        }
    }
});
