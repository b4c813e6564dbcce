//! A verified GitHub delivery's body, read as the server reads it. Input: the
//! `X-GitHub-Event` name, a newline, then the body.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (event, body) = match data.iter().position(|b| *b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (&b"push"[..], data),
    };
    let event = String::from_utf8_lossy(event);
    if let Ok(line) = bosun_server::vcs::webhook::inspect(&event, body) {
        assert!(!line.is_empty());
    }
});
